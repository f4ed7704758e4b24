"""Run a TrainingJob as local processes, without Kubernetes: one process per node-rank with the
environment the operator gives that node's pod (``phalanx.render.pod.rendezvous_env`` and
``spec.env``, with the rendezvous on 127.0.0.1). Built-in jobs run the pod's entrypoint
(``phalanx-runtime``: torchrun, ``procsPerNode`` workers); command jobs (``spec.command``) run
the user's command and args (``$(VAR)`` expanded as the kubelet does), so a script can be tried
before it is submitted. ``phalanx local JOB.yaml [--json]`` calls :func:`run_local`; with
``json=True`` the last stdout line is a JSON summary.

``phalanx local`` owns its processes: SIGINT/SIGTERM asks every node to checkpoint and stop (one
SIGTERM each, as the kubelet sends a pod), a second signal or the end of the grace period kills
whatever of the run is left, and if ``phalanx local`` is killed outright its children get SIGTERM
from the kernel (PR_SET_PDEATHSIG) and stop the same way. See docs/runtime.md, "Stopping and
preemption".
"""

from __future__ import annotations

import json as _json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from phalanx.constants import (
    DEEPSPEED_CONFIG_FILE,
    ENV_CHECKPOINT_DIR,
    ENV_CONFIG_PATH,
    ENV_DEEPSPEED_CONFIG,
    ENV_MASTER_ADDR,
    ENV_METRICS_PORT,
    ENV_PARENT_PID,
    ENV_PET_MASTER_ADDR,
    ENV_PET_NNODES,
    ENV_PET_NODE_RANK,
    ENV_PET_RDZV_ENDPOINT,
    ENV_PROGRESS_PORT,
    ENV_STOP_GRACE_SECONDS,
    ENV_TF_CONFIG,
    ENV_WORLD_SIZE,
    LOCAL_STOP_GRACE_SECONDS,
)
from phalanx_runtime import env as E
from phalanx_runtime import lifetime
from phalanx_runtime.config import RuntimeConfig
from phalanx_runtime.net import free_port, free_ports

EXIT_PREEMPTED = lifetime.EXIT_PREEMPTED  # re-exported for callers of run_local
EXIT_TIMEOUT = 124  # as timeout(1)
TMP_PREFIX = "phalanx-local-"
OWNER_FILE = "owner"  # "<pid> <start time>" of the phalanx local that made the temp dir
# Never inherited from the caller's environment: they would mislead the launcher or torchrun.
SCRUBBED_ENV = (E.ENV_RANK, ENV_WORLD_SIZE, E.ENV_LOCAL_RANK, E.ENV_LOCAL_WORLD_SIZE, E.ENV_GROUP_RANK,
                E.SLURM_NTASKS, ENV_PET_NNODES, ENV_PET_NODE_RANK)


class LayoutError(ValueError):
    """The job cannot run; ``errors`` names each field and reason."""

    def __init__(self, errors: list[str]):
        super().__init__("invalid job:\n  - " + "\n  - ".join(errors))
        self.errors = errors


class Stopped(RuntimeError):
    """The run was stopped (SIGINT/SIGTERM, or a node stopped by one): the job is not finished;
    checkpoints were taken where the processes could reach a step boundary."""

    exit_code = EXIT_PREEMPTED


class RunTimeout(Stopped, TimeoutError):
    exit_code = EXIT_TIMEOUT


def load_job(path: str | os.PathLike) -> RuntimeConfig:
    from phalanx.api.manifests import read_documents  # the one YAML reader (duplicate keys refused)
    from phalanx.api.types import TrainingJob

    docs = [d for d in read_documents(str(path)) if d]
    docs = [d for d in docs if d.get("kind", "TrainingJob") == "TrainingJob"] or docs
    if not docs:
        raise ValueError(f"{path}: no TrainingJob document")
    job = TrainingJob.model_validate(docs[0])
    return RuntimeConfig(spec=job.spec, name=job.metadata.name, namespace=job.metadata.namespace,
                         api_version=job.api_version)


def _fd(stream):
    """A file descriptor children can inherit (None = ours) — pytest's capture has none."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


# --------------------------------------------------------------------------------------------
# The pod's environment, on this machine

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_refs(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined references replaced, others kept, ``$$`` → ``$``."""
    return _VAR_REF.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def _field_ref(cfg: RuntimeConfig, node: int, path: str) -> str | None:
    from phalanx.render.names import pod_name

    return {"metadata.name": pod_name(cfg.name, node, 0), "metadata.namespace": cfg.namespace,
            "spec.nodeName": socket.gethostname()}.get(path)


def pod_env(cfg: RuntimeConfig, node: int, *, master_port: int, config_path: str, checkpoint_dir: str,
            progress_port: int | None = None, tf_workers: list[str] | None = None) -> dict[str, str]:
    """Node ``node``'s container env as the operator renders it (attempt 0), then ``spec.env``;
    local differences: the rendezvous host is 127.0.0.1, config and checkpoints are local paths,
    no metrics port (the nodes share this host), a progress port only when asked for, and a
    tensorflow job's TF_CONFIG lists ``tf_workers`` (127.0.0.1:<port of each node>) instead of
    the pods' DNS names."""
    from phalanx.api.types import ObjectMeta, TrainingJob
    from phalanx.render.pod import rendezvous_env
    from phalanx.render.tensorflow import tf_config_json

    job = TrainingJob(metadata=ObjectMeta(name=cfg.name, namespace=cfg.namespace), spec=cfg.spec)
    env: dict[str, str] = {}
    for e in rendezvous_env(job, node, 0, master_port):
        value = e.get("value", _field_ref(cfg, node, e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")))
        if value is not None:
            env[e["name"]] = str(value)
    env.update({ENV_MASTER_ADDR: "127.0.0.1", ENV_PET_MASTER_ADDR: "127.0.0.1",
                ENV_PET_RDZV_ENDPOINT: f"127.0.0.1:{master_port}", ENV_CONFIG_PATH: config_path,
                ENV_CHECKPOINT_DIR: checkpoint_dir})
    if ENV_DEEPSPEED_CONFIG in env:  # framework deepspeed: next to config.json, as in the pod
        env[ENV_DEEPSPEED_CONFIG] = os.path.join(os.path.dirname(config_path), DEEPSPEED_CONFIG_FILE)
    if ENV_TF_CONFIG in env and tf_workers:  # framework tensorflow: the same cluster, on this host
        env[ENV_TF_CONFIG] = tf_config_json(tf_workers, node)
    env.pop(ENV_METRICS_PORT, None)
    env.pop(ENV_PROGRESS_PORT, None)
    if node == 0 and progress_port:
        env[ENV_PROGRESS_PORT] = str(progress_port)
    for item in cfg.spec.env:
        e = item.to_kube() if hasattr(item, "to_kube") else dict(item)
        if e.get("value") is not None:
            env[e["name"]] = expand_refs(str(e["value"]), env)
        elif "valueFrom" in e:
            print(f"phalanx local: env {e['name']}: valueFrom is not available locally; not set", file=sys.stderr)
        else:
            env[e["name"]] = ""
    return env


def node_argv(cfg: RuntimeConfig, env: dict[str, str], config_path: str) -> list[str]:
    """The pod's command: the user's (command jobs; with the parent-death trampoline) or the launcher."""
    spec = cfg.spec
    if spec.command:
        user = [expand_refs(a, env) for a in [*spec.command, *(spec.args or [])]]
        return [sys.executable, "-m", "phalanx_runtime.lifetime", "--", *user]
    return [sys.executable, "-m", "phalanx_runtime.launch", "--config", config_path]


# --------------------------------------------------------------------------------------------
# The run's processes


class StopSignals:
    """SIGINT/SIGTERM to ``phalanx local`` (main thread only): the first asks for a stop, a second
    one for an immediate kill."""

    def __init__(self):
        self.signum: int | None = None
        self.force = False
        self._prev: dict[int, object] = {}

    def _handler(self, signum, frame):  # noqa: ARG002
        if self.signum is None:
            self.signum = signum
            msg = (f"phalanx local: {signal.Signals(signum).name}: asking every node to checkpoint and stop "
                   "(again to kill now)\n")
        else:
            self.force = True
            msg = "phalanx local: second signal: killing the run now\n"
        os.write(2, msg.encode())  # no print(): the handler may interrupt a print in the main thread

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._prev[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, prev in self._prev.items():
            signal.signal(sig, prev)


class LocalRun:
    """One process per node-rank, each in its own process group (a terminal's Ctrl-C reaches
    only ``phalanx local``, which turns it into one SIGTERM per node, as the kubelet would)."""

    def __init__(self, argvs: list[list[str]], envs: list[dict[str, str]], stdout, stderr):
        self.procs: list[subprocess.Popen] = []
        self.adopted: set[int] = set()
        self.t0 = time.monotonic()
        try:
            for argv, env in zip(argvs, envs, strict=True):
                self.procs.append(subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr, process_group=0))
        except BaseException:
            self.kill()
            raise

    def codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def adopt_orphans(self, before: set[int]) -> None:
        """Children of ours that we did not start: the run's orphans (their parent died and we
        are a subreaper)."""
        self.adopted |= set(lifetime.children(os.getpid())) - before - {p.pid for p in self.procs}

    def tree(self) -> set[int]:
        """Every live process of the run: the nodes, the orphans we adopted, their descendants."""
        roots = {p.pid for p in self.procs} | self.adopted
        out = set(roots)
        for r in roots:
            out.update(lifetime.descendants(r))
        return {p for p in out if lifetime.alive(p)}

    def terminate(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        lifetime.kill_pids(self.tree(), signal.SIGKILL)


def _first_failure(codes: list[int | None]) -> tuple[int, int] | None:
    return next(((i, c) for i, c in enumerate(codes) if c not in (None, 0, EXIT_PREEMPTED)), None)


def _supervise(run: LocalRun, stop: StopSignals, *, grace: float, timeout: float | None,
               before: set[int]) -> tuple[str, tuple[int, int] | None]:
    """Wait for every node; on a stop signal, a failed or stopped node, or the timeout, SIGTERM the
    rest and SIGKILL the run's process tree after the grace period. Returns why it ended ("done",
    "failed", "stopped", "timeout") and the first failure (node, exit code) seen before any stop;
    nothing of the run is alive when it returns."""
    reason, failure, kill_at = None, None, None
    while any(c is None for c in run.codes()):
        codes = run.codes()
        if reason is None:
            failure = _first_failure(codes)
            if stop.signum is not None:
                reason = "stopped"
            elif any(c not in (None, 0) for c in codes):
                reason = "failed" if failure else "stopped"
            elif timeout and time.monotonic() - run.t0 > timeout:
                reason = "timeout"
            if reason is not None:
                run.terminate()
                kill_at = time.monotonic() + lifetime.escalation(3, grace)
        elif stop.force or time.monotonic() > kill_at:
            run.kill()
        run.adopt_orphans(before)
        time.sleep(0.1)
    run.adopt_orphans(before)
    lifetime.kill_pids(run.tree(), signal.SIGKILL)  # e.g. a command job's workers whose agent is gone
    lifetime.reap(run.adopted)
    codes = run.codes()
    if all(c == 0 for c in codes):
        return "done", None  # finished before a stop could take effect
    if reason is None:
        failure = _first_failure(codes)
        reason = "failed" if failure else "stopped"
    return reason, failure


# --------------------------------------------------------------------------------------------
# Temporary directories of runs that were killed outright


def _make_tmp_dir() -> str:
    _sweep_stale_tmp()
    d = tempfile.mkdtemp(prefix=TMP_PREFIX)
    Path(d, OWNER_FILE).write_text(f"{os.getpid()} {lifetime.start_time(os.getpid())}")
    return d


def _sweep_stale_tmp() -> None:
    """Remove the temp dirs (config, default checkpoints) of earlier runs whose ``phalanx local``
    is gone without cleaning up (SIGKILL)."""
    for d in Path(tempfile.gettempdir()).glob(TMP_PREFIX + "*"):
        try:
            pid, started = Path(d, OWNER_FILE).read_text().split()
        except (OSError, ValueError):
            continue
        if str(lifetime.start_time(int(pid))) != started:
            shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# run_local


def _check(cfg: RuntimeConfig) -> None:
    """Built-in jobs: the runtime's layout rules, before anything starts. Command jobs: none (the
    script is the user's; nodes × procsPerNode is the world size by construction)."""
    if cfg.spec.command:
        return
    if cfg.spec.model is None:
        raise LayoutError(["model: set model.preset or model.entrypoint (built-in runtime) or command (your own)"])
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        cuda = False
    from phalanx.api.layout import check_layout

    errors = check_layout(cfg.spec, cuda_available=cuda)
    if errors:
        raise LayoutError(errors)


def _node_envs(cfg: RuntimeConfig, d: str, *, env, checkpoint_dir, progress_port, grace) -> list[dict[str, str]]:
    spec = cfg.spec
    world = spec.nodes * spec.procs_per_node
    base = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    base[E.ENV_OMP_NUM_THREADS] = str(max(1, (os.cpu_count() or 1) // world))
    base.update(env or {})
    base.update({ENV_PARENT_PID: str(os.getpid()), ENV_STOP_GRACE_SECONDS: f"{grace:g}",
                 E.ENV_RESULT_FILE: os.path.join(d, "result.json")})
    master_port = free_port()
    tf_workers = [f"127.0.0.1:{p}" for p in free_ports(spec.nodes)] if _uses_tensorflow(spec) else None
    ckpt = os.path.abspath(checkpoint_dir) if checkpoint_dir else os.path.join(d, "checkpoints")
    return [{**base, **pod_env(cfg, node, master_port=master_port, config_path=os.path.join(d, "config.json"),
                               checkpoint_dir=ckpt, progress_port=progress_port, tf_workers=tf_workers)}
            for node in range(spec.nodes)]


def _uses_tensorflow(spec) -> bool:
    from phalanx.render.tensorflow import uses_tensorflow

    return uses_tensorflow(spec)


def run_local(job_yaml_path: str | os.PathLike | RuntimeConfig, json: bool = False, *, timeout: float | None = None,
              progress_port: int | None = None, env: dict[str, str] | None = None,
              checkpoint_dir: str | os.PathLike | None = None) -> dict:
    """Run the job to completion on this machine; returns the summary dict (and prints it as the
    last stdout line when ``json``). Raises :class:`LayoutError` before starting anything if a
    built-in job's layout is impossible here, RuntimeError if a node fails, :class:`Stopped` after
    SIGINT/SIGTERM, :class:`RunTimeout` after ``timeout`` seconds (both stop the job as a
    preemption does: checkpoint at the next step boundary, kill after the grace period).

    ``env`` is added to every node's environment (``PHALANX_STOP_GRACE_SECONDS`` there or in ours
    sets the grace period; default 30 s). Checkpoints go to ``checkpoint_dir`` (a rerun with the
    same directory resumes) or to ``<job tmp dir>/checkpoints``, removed at the end."""
    cfg = job_yaml_path if isinstance(job_yaml_path, RuntimeConfig) else load_job(job_yaml_path)
    _check(cfg)
    grace = lifetime.stop_grace({**os.environ, **(env or {})}, default=LOCAL_STOP_GRACE_SECONDS)
    out_stream = _fd(sys.stderr) if json else _fd(sys.stdout)
    d = _make_tmp_dir()
    was_subreaper = lifetime.set_subreaper(True)
    try:
        Path(d, "config.json").write_text(_json.dumps(cfg.to_dict()))
        _write_deepspeed_config(cfg, d)
        envs = _node_envs(cfg, d, env=env, checkpoint_dir=checkpoint_dir, progress_port=progress_port, grace=grace)
        argvs = [node_argv(cfg, e, os.path.join(d, "config.json")) for e in envs]
        before = set(lifetime.children(os.getpid()))
        with StopSignals() as stop:
            run = LocalRun(argvs, envs, out_stream, _fd(sys.stderr))
            try:
                reason, failure = _supervise(run, stop, grace=grace, timeout=timeout, before=before)
            except BaseException:  # never leave the run behind
                run.kill()
                raise
        seconds = time.monotonic() - run.t0
        _raise_for(reason, failure, run.codes(), timeout)
        summary = _summary(cfg, d, run.codes(), seconds)
    finally:
        lifetime.set_subreaper(was_subreaper)
        shutil.rmtree(d, ignore_errors=True)
    _print_summary(cfg, summary, json)
    return summary


def _write_deepspeed_config(cfg: RuntimeConfig, d: str) -> None:
    """framework deepspeed: the DeepSpeed config the ConfigMap carries, where $PHALANX_DEEPSPEED_CONFIG points."""
    from phalanx.render.deepspeed import deepspeed_config, uses_deepspeed

    if uses_deepspeed(cfg.spec):
        Path(d, DEEPSPEED_CONFIG_FILE).write_text(_json.dumps(deepspeed_config(cfg.spec), indent=2, sort_keys=True))


def _raise_for(reason: str, failure: tuple[int, int] | None, codes: list[int | None], timeout: float | None) -> None:
    if reason == "timeout":
        raise RunTimeout(f"local run exceeded {timeout}s; stopped (node exit codes {codes})")
    if reason == "stopped":
        raise Stopped(f"stopped; node exit codes {codes} (143: stopped after SIGTERM)")
    if reason == "failed":
        raise RuntimeError(f"node {failure[0]} exited with code {failure[1]}")


def _summary(cfg: RuntimeConfig, d: str, codes: list[int | None], seconds: float) -> dict:
    world = cfg.spec.nodes * cfg.spec.procs_per_node
    if cfg.spec.command:
        return {"mode": "command", "world_size": world, "nodes": cfg.spec.nodes, "exit_codes": codes,
                "seconds": round(seconds, 3)}
    full = _json.loads(Path(d, "result.json").read_text())
    return {"final_loss": full["final_loss"], "steps": full["steps"], "tokens_per_s": full["tokens_per_s"],
            "world_size": full["world_size"], "losses": full.get("losses", []),
            "grad_norms": full.get("grad_norms", []), "step_times": full.get("step_times", []),
            "mfu": full.get("mfu")}


def _print_summary(cfg: RuntimeConfig, s: dict, json: bool) -> None:
    sys.stdout.flush()
    if json:
        keys = (("mode", "world_size", "nodes", "exit_codes", "seconds") if cfg.spec.command
                else ("final_loss", "steps", "tokens_per_s", "world_size"))
        print(_json.dumps({k: s[k] for k in keys}), flush=True)
    elif cfg.spec.command:
        print(f"job {cfg.name}: command finished on {s['nodes']} nodes ({s['world_size']} ranks) in "
              f"{s['seconds']:.1f}s", flush=True)
    else:
        print(f"job {cfg.name}: {s['steps']} steps on {s['world_size']} ranks, final loss {s['final_loss']:.4f}, "
              f"{s['tokens_per_s']:.0f} tokens/s", flush=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m phalanx_runtime.local")
    ap.add_argument("job")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--timeout", type=float, default=None, help="stop the run after this many seconds")
    ap.add_argument("--checkpoint-dir", default=None,
                    help="keep checkpoints here (a rerun resumes); default: the run's temporary directory")
    args = ap.parse_args(argv)
    try:
        run_local(args.job, json=args.json, timeout=args.timeout, checkpoint_dir=args.checkpoint_dir)
    except LayoutError as e:
        print(str(e), file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"failed: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
