"""``python -m phalanx_runtime.horovod_launch [--] CMD [ARGS…]``: the launcher of a
``framework: horovod`` pod, in place of horovodrun and ssh (docs/horovod.md, docs/runtime.md).

It reads the ``HOROVOD_*`` env the operator renders into every pod (frameworks/horovod.py), then:

1. pod 0 (``HOROVOD_CROSS_RANK`` 0) starts Horovod's own HTTP rendezvous server
   (``RendezvousHTTPServer``, what horovodrun starts on a random port) on the fixed
   ``HOROVOD_GLOO_RENDEZVOUS_PORT``, initialised with the plan ``<host>-0:P,…,<host>-<N-1>:P``
   (the pods' ``HOROVOD_HOSTNAME`` names), in a thread of this process;
2. every pod waits until ``HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT`` accepts TCP — a worker that calls
   ``hvd.init()`` before the server is up aborts after 3 tries 500 ms apart (SIGABRT, exit 134);
3. it starts ``P = HOROVOD_LOCAL_SIZE`` copies of CMD, process ``l`` with
   ``HOROVOD_RANK = cross_rank × P + l`` and ``HOROVOD_LOCAL_RANK = l`` (the per-process part of
   horovodrun's env), each dying with this process (``phalanx_runtime.lifetime`` trampoline);
4. it waits for them: the first that fails stops the others (a Horovod job cannot go on without
   a rank) and its exit code is the pod's; SIGTERM/SIGINT go to every process, which gets
   ``$PHALANX_STOP_GRACE_SECONDS`` to finish before SIGKILL.

Exit codes: the processes' (0 when all succeed; a signal ``s`` as 128 + s; 143 when stopped before
they started); 2 when the env is not a horovod pod's or pod 0's image lacks Horovod (permanent); 1 when the rendezvous server is unreachable in time (retryable: the
operator restarts the gang). Horovod itself is imported only by pod 0, for the server.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx_common.contract import (
    ENV_HOROVOD_CROSS_RANK,
    ENV_HOROVOD_CROSS_SIZE,
    ENV_HOROVOD_GLOO_TIMEOUT,
    ENV_HOROVOD_HOSTNAME,
    ENV_HOROVOD_LOCAL_RANK,
    ENV_HOROVOD_LOCAL_SIZE,
    ENV_HOROVOD_RANK,
    ENV_HOROVOD_RENDEZVOUS_ADDR,
    ENV_HOROVOD_RENDEZVOUS_PORT,
    ENV_HOROVOD_SIZE,
    HOROVOD_GLOO_TIMEOUT_SECONDS,
)
from phalanx_runtime.lifetime import (
    escalation,
    exit_preempted,
    stop_grace,
    trampoline,
)

EXIT_INVALID = 2
EXIT_UNREACHABLE = 1
POLL_SECONDS = 0.2


class LaunchError(ValueError):
    """The environment is not a horovod pod's."""


def log(msg: str) -> None:
    print(f"[horovod-launch] {msg}", file=sys.stderr, flush=True)


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value in (None, ""):
        if default is None:
            raise LaunchError(f"${name} is not set (a framework: horovod pod gets it from the operator)")
        return default
    try:
        return int(value)
    except ValueError:
        raise LaunchError(f"${name}={value!r} is not an integer") from None


@dataclass(frozen=True)
class HorovodPod:
    """One Horovod host: the pod's share of the env the operator renders."""

    addr: str
    port: int
    hostname: str
    cross_rank: int
    cross_size: int
    local_size: int
    timeout: float

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HorovodPod:
        addr, hostname = env.get(ENV_HOROVOD_RENDEZVOUS_ADDR), env.get(ENV_HOROVOD_HOSTNAME)
        for name, value in ((ENV_HOROVOD_RENDEZVOUS_ADDR, addr), (ENV_HOROVOD_HOSTNAME, hostname)):
            if not value:
                raise LaunchError(f"${name} is not set (a framework: horovod pod gets it from the operator)")
        pod = cls(addr, _int(env, ENV_HOROVOD_RENDEZVOUS_PORT), hostname, _int(env, ENV_HOROVOD_CROSS_RANK),
                  _int(env, ENV_HOROVOD_CROSS_SIZE), _int(env, ENV_HOROVOD_LOCAL_SIZE),
                  float(_int(env, ENV_HOROVOD_GLOO_TIMEOUT, HOROVOD_GLOO_TIMEOUT_SECONDS)))
        pod.check(_int(env, ENV_HOROVOD_SIZE, pod.size))
        return pod

    @property
    def size(self) -> int:
        return self.cross_size * self.local_size

    @property
    def serves(self) -> bool:
        """Pod 0 runs the rendezvous server."""
        return self.cross_rank == 0

    def check(self, size: int) -> None:
        if not 0 <= self.cross_rank < self.cross_size or self.local_size < 1:
            raise LaunchError(f"{ENV_HOROVOD_CROSS_RANK}={self.cross_rank} outside {ENV_HOROVOD_CROSS_SIZE}="
                              f"{self.cross_size}, or {ENV_HOROVOD_LOCAL_SIZE}={self.local_size} < 1")
        if size != self.size:
            raise LaunchError(f"{ENV_HOROVOD_SIZE}={size} is not {ENV_HOROVOD_CROSS_SIZE} × "
                              f"{ENV_HOROVOD_LOCAL_SIZE} = {self.size}")
        if not 0 < self.port < 65536:
            raise LaunchError(f"{ENV_HOROVOD_RENDEZVOUS_PORT}={self.port} is not a TCP port")
        self.host_prefix()  # the hostname names its cross rank

    def host_prefix(self) -> str:
        """``<job>-node-`` of ``HOROVOD_HOSTNAME=<job>-node-<cross rank>``: every pod's name."""
        suffix = f"-{self.cross_rank}"
        if not self.hostname.endswith(suffix) or len(self.hostname) == len(suffix):
            raise LaunchError(f"{ENV_HOROVOD_HOSTNAME}={self.hostname!r} does not end in '{suffix}' "
                              f"({ENV_HOROVOD_CROSS_RANK}): hosts are named <prefix>-<cross rank>")
        return self.hostname[: -len(str(self.cross_rank))]

    def hosts(self) -> str:
        """The rendezvous plan in horovodrun's ``-H`` syntax: every pod and its slots."""
        prefix = self.host_prefix()
        return ",".join(f"{prefix}{r}:{self.local_size}" for r in range(self.cross_size))

    def process_env(self, local_rank: int) -> dict[str, str]:
        """What differs between the pod's processes: the rank and the local rank."""
        if not 0 <= local_rank < self.local_size:
            raise ValueError(f"local rank {local_rank} outside {self.local_size} processes")
        return {ENV_HOROVOD_RANK: str(self.cross_rank * self.local_size + local_rank),
                ENV_HOROVOD_LOCAL_RANK: str(local_rank)}


def start_rendezvous_server(hosts: str, port: int, bind: str = "") -> Any:
    """Horovod's HTTP rendezvous server on ``port``, serving in a daemon thread. ``init(plan)``
    tells it each scope's size (global, local_<host>, cross_<local rank>), so that it clears a
    scope once all its members have connected. Returns the server (``.shutdown()`` stops it)."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    parsed = parse_hosts(hosts)
    server = RendezvousHTTPServer((bind, port), RendezvousHandler, 0)
    server.init(get_host_assignments(parsed, sum(h.slots for h in parsed)))
    threading.Thread(target=server.serve_forever, name="horovod-rendezvous", daemon=True).start()
    return server


def wait_for_server(addr: str, port: int, timeout: float, *, interval: float = 1.0,
                    connect: Callable[..., Any] = socket.create_connection,
                    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> float:
    """Block until ``addr:port`` accepts TCP (its name may not resolve yet either); the seconds
    it took. TimeoutError after ``timeout``."""
    start = clock()
    while True:
        try:
            connect((addr, port), min(interval * 2, 5.0)).close()
            return clock() - start
        except OSError as e:
            if clock() - start >= timeout:
                raise TimeoutError(f"Horovod rendezvous server {addr}:{port} unreachable after {timeout:.0f}s: {e}") from e
        sleep(interval)


def exit_code(returncode: int) -> int:
    """Popen's ``-s`` for a signal as a shell's 128 + s."""
    return 128 - returncode if returncode < 0 else returncode


class Processes:
    """The pod's ``P`` processes: started together, stopped together."""

    def __init__(self, procs: list[subprocess.Popen], grace: float):
        self.procs = procs
        self.grace = grace  # SIGTERM → SIGKILL
        self.stop_deadline: float | None = None

    @classmethod
    def start(cls, cmd: list[str], pod: HorovodPod, env: Mapping[str, str]) -> Processes:
        wrapped = trampoline(cmd, os.getpid())  # dies (SIGTERM) with this launcher
        procs = [subprocess.Popen(wrapped, env={**env, **pod.process_env(local)}) for local in range(pod.local_size)]
        return cls(procs, escalation(0, stop_grace()))

    def signal_all(self, sig: int = signal.SIGTERM) -> None:
        for p in self.procs:
            p.send_signal(sig)  # a no-op once the process was reaped

    def stop(self) -> None:
        """SIGTERM now, SIGKILL after the grace period (see ``wait``)."""
        if self.stop_deadline is None:
            self.stop_deadline = time.monotonic() + self.grace
            self.signal_all(signal.SIGTERM)

    def wait(self) -> int:
        """Until every process has exited; the first failure's exit code (it stops the rest)."""
        first: int | None = None
        while True:
            for i, p in enumerate(self.procs):
                code = p.poll()
                if code not in (None, 0) and first is None:
                    first = exit_code(code)
                    log(f"process {i} exited with {first}; stopping the others")
                    self.stop()
            if all(p.poll() is not None for p in self.procs):
                return first or 0
            if self.stop_deadline is not None and time.monotonic() > self.stop_deadline:
                self.signal_all(signal.SIGKILL)
            time.sleep(POLL_SECONDS)


def run(cmd: list[str], env: Mapping[str, str], *, bind: str = "") -> int:
    """The launcher's work, after the env was read (``main`` handles the exit codes)."""
    pod = HorovodPod.from_env(env)
    # In a pod this is PID 1, which the kernel spares every signal it has no handler for: until
    # the processes exist, a stop is an exit (pod 0's server goes with it).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, exit_preempted)
    server = None
    if pod.serves:
        server = start_rendezvous_server(pod.hosts(), pod.port, bind)
        log(f"rendezvous server on :{pod.port} for {pod.hosts()}")
    try:
        log(f"{pod.hostname}: waiting for the rendezvous server {pod.addr}:{pod.port}")
        try:
            waited = wait_for_server(pod.addr, pod.port, pod.timeout)
        except TimeoutError as e:
            log(str(e))
            return EXIT_UNREACHABLE
        log(f"{pod.hostname}: server {pod.addr}:{pod.port} up after {waited:.1f}s; starting {pod.local_size} "
            f"process(es), ranks {pod.cross_rank * pod.local_size}..{(pod.cross_rank + 1) * pod.local_size - 1} of {pod.size}")
        procs = Processes.start(cmd, pod, env)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: procs.stop())
        return procs.wait()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m phalanx_runtime.horovod_launch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--print-env", action="store_true", help="print each process's HOROVOD_* env and the plan, start nothing")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="the command of every process (after --)")
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    try:
        if args.print_env:
            pod = HorovodPod.from_env(os.environ)
            print(f"hosts {pod.hosts()}")
            for local in range(pod.local_size):
                print(" ".join(f"{k}={v}" for k, v in pod.process_env(local).items()))
            return 0
        if not cmd:
            ap.error("no command")
        return run(cmd, dict(os.environ))
    except LaunchError as e:
        log(f"not a framework: horovod pod: {e}")
        return EXIT_INVALID
    except ImportError as e:  # pod 0 serves the rendezvous with Horovod's own server
        log(f"pod 0 needs Horovod in the image for the rendezvous server: {e}")
        return EXIT_INVALID


if __name__ == "__main__":
    raise SystemExit(main())
