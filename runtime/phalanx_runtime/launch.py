"""``phalanx-runtime``: the pod's entrypoint. Reads the job config and the environment
(Kubeflow ``PET_*``, Phalanx/torchrun names, or Slurm), refuses impossible layouts before any
worker starts, then runs ``procsPerNode`` workers through the torch elastic launcher
(``torch.distributed.run``, static rendezvous at node-rank 0, so global rank = NODE_RANK ×
procsPerNode + local rank; one node: ``--standalone``) — nccl on GPUs, gloo on CPU. The workers
are forked from a forkserver that imported torch and the runtime once for all of them
(``workers``).

Exit codes: 0 success; 2 invalid config/layout (permanent); 1 a worker failed; 75 restart in
place (``inplace``: a worker killed by a signal, a peer gone, or the operator's request — the pod's
restart rule restarts its containers); 143 stopped by SIGTERM (preemption, suspend, pod deletion)
after the workers saved a checkpoint (retryable).
On a failure the pod's termination message says why (``failure_report``): the failing worker's
exception, else the launcher's (an invalid config, a worker killed by a signal, the rendezvous).
SIGTERM (and SIGINT, taken as SIGTERM) reaches the workers through torchrun's agent; each worker
has ``$PHALANX_STOP_GRACE_SECONDS`` (90 s in pods) to checkpoint, the agent kills them 5 s later,
and this process exits 5 s after that whatever happens — inside the pod's 120 s grace period. When
``$PHALANX_PARENT_PID`` names our parent (``phalanx local``), its death stops us like a SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
from dataclasses import dataclass

from phalanx_common.contract import (
    DEFAULT_MASTER_PORT,
    ENV_CONFIG_PATH,
    ENV_JOB_NAME,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_NNODES,
    ENV_NODE_RANK,
    ENV_NPROC_PER_NODE,
    ENV_PARENT_PID,
    ENV_PET_MASTER_ADDR,
    ENV_PET_MASTER_PORT,
    ENV_PET_MAX_RESTARTS,
    ENV_PET_NNODES,
    ENV_PET_NODE_RANK,
    ENV_PET_NPROC_PER_NODE,
    ENV_PET_RDZV_ENDPOINT,
    ENV_PET_RDZV_ID,
    ENV_PYTHONUNBUFFERED,
    ENV_RESTART_ATTEMPT,
    ENV_WORLD_SIZE,
    SCRATCH_MOUNT_PATH,
    ErrorSource,
    StartupPhase,
)
from phalanx_common.hf_config import check_pretrained
from phalanx_common.layout import check_layout
from phalanx_runtime import env as runtime_env
from phalanx_runtime import inplace
from phalanx_runtime.config import RuntimeConfig, default_config_path, load_config
from phalanx_runtime.failure_report import (
    child_failure,
    invalid_job,
    report_exception,
    termination_log,
    write_report,
)
from phalanx_runtime.lifetime import (
    EXIT_PREEMPTED,
    StopWatchdog,
    descendants,
    die_with_parent,
    escalation,
    exit_preempted,
    kill_pids,
    parent_pid_from_env,
    stop_grace,
)
from phalanx_runtime.startup import StartupTimeline
from phalanx_runtime.workers import (
    WorkerStart,
    preload_forkserver,
    preload_modules,
    worker_args,
    worker_start,
)

log = logging.getLogger("phalanx_runtime.launch")
EXIT_INVALID = 2
EXIT_WORKER_FAILED = 1
# torchrun forwards these to the workers; not SIGINT, which _sigint_as_sigterm turns into SIGTERM.
AGENT_SIGNALS = "SIGTERM,SIGHUP,SIGQUIT"


@dataclass
class LaunchEnv:
    nnodes: int
    node_rank: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    rdzv_id: str
    max_restarts: int = 0
    direct: bool = False  # Slurm one-task-per-rank: run the worker in this process
    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    source: str = "spec"


def expand_slurm_nodelist(nodelist: str) -> list[str]:
    """``"gpu[01-03,07],cpu5"`` → ``["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]``."""
    hosts: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist):
        prefix, ranges = m.group(1), m.group(2)
        if not ranges:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            if "-" in part:
                a, b = part.split("-", 1)
                hosts.extend(f"{prefix}{i:0{len(a)}d}" for i in range(int(a), int(b) + 1))
            else:
                hosts.append(prefix + part)
    return hosts


def _first(env, *names, default=None):
    for n in names:
        if env.get(n) not in (None, ""):
            return env[n]
    return default


def resolve_env(spec, env: dict[str, str] | None = None, job_name: str = "job") -> LaunchEnv:
    env = dict(os.environ if env is None else env)
    rdzv_id = _first(env, ENV_PET_RDZV_ID, default=None) or f"{job_name}-{env.get(ENV_RESTART_ATTEMPT, '0')}"
    max_restarts = int(_first(env, ENV_PET_MAX_RESTARTS, default=0))
    if runtime_env.SLURM_NTASKS in env and not _first(env, ENV_PET_NNODES, ENV_NNODES):
        return _slurm_env(spec, env, job_name, max_restarts)
    nnodes = int(_first(env, ENV_PET_NNODES, ENV_NNODES, default=spec.nodes))
    node_rank = int(_first(env, ENV_PET_NODE_RANK, ENV_NODE_RANK, runtime_env.ENV_GROUP_RANK, default=0))
    nproc = int(_first(env, ENV_PET_NPROC_PER_NODE, ENV_NPROC_PER_NODE, default=spec.procs_per_node))
    endpoint = _first(env, ENV_PET_RDZV_ENDPOINT, default=None)
    if endpoint:
        addr, _, port = endpoint.rpartition(":")
    else:
        addr = _first(env, ENV_PET_MASTER_ADDR, ENV_MASTER_ADDR, default="127.0.0.1")
        port = _first(env, ENV_PET_MASTER_PORT, ENV_MASTER_PORT, default=DEFAULT_MASTER_PORT)
    source = "kubeflow" if _first(env, ENV_PET_NNODES) else ("env" if _first(env, ENV_NNODES) else "spec")
    return LaunchEnv(nnodes, node_rank, nproc, addr, int(port), rdzv_id, max_restarts, source=source)


def _slurm_env(spec, env: dict[str, str], job_name: str, max_restarts: int) -> LaunchEnv:
    world = spec.nodes * spec.procs_per_node
    ntasks = int(env[runtime_env.SLURM_NTASKS])
    snodes = int(env.get(runtime_env.SLURM_NNODES, env.get(runtime_env.SLURM_JOB_NUM_NODES, "1")))
    hosts = expand_slurm_nodelist(env.get(runtime_env.SLURM_JOB_NODELIST, env.get(runtime_env.SLURM_NODELIST, "localhost")))
    addr = env.get(ENV_MASTER_ADDR) or (hosts[0] if hosts else "localhost")
    port = int(env.get(ENV_MASTER_PORT, DEFAULT_MASTER_PORT))
    rid = f"slurm-{env.get(runtime_env.SLURM_JOB_ID, job_name)}"
    node_rank = int(env.get(runtime_env.SLURM_NODEID, 0))
    if ntasks == world and (ntasks > snodes or spec.procs_per_node == 1):
        # srun started one task per rank: no torchrun, this process is the worker.
        return LaunchEnv(snodes, node_rank, spec.procs_per_node, addr, port, rid, direct=True,
                         rank=int(env[runtime_env.SLURM_PROCID]), world_size=ntasks,
                         local_rank=int(env.get(runtime_env.SLURM_LOCALID, 0)), source="slurm-per-rank")
    return LaunchEnv(snodes, node_rank, spec.procs_per_node, addr, port, rid, max_restarts, source="slurm-per-node")


def torchrun_args(le: LaunchEnv, config_path: str, start: WorkerStart = WorkerStart.FORKSERVER) -> list[str]:
    """Arguments for ``torch.distributed.run``: static rendezvous at node-rank 0, so global rank =
    NODE_RANK × nproc + local rank — the order the operator's topology-aware placement chose (c10d
    would number nodes by arrival). Elastic jobs too: the operator resizes by replacing the whole
    gang, and every gang has a fixed size. ``start``: how the workers start (``workers``).
    """
    args = ["--nnodes", str(le.nnodes), "--nproc-per-node", str(le.nproc_per_node), "--node-rank", str(le.node_rank),
            "--max-restarts", str(le.max_restarts), "--monitor-interval", "1", "--rdzv-backend", "static",
            "--master-addr", le.master_addr, "--master-port", str(le.master_port)]
    if le.nnodes == 1:
        # Single node: a private rendezvous on a free port (no clash with other jobs on the host).
        args = ["--standalone", "--nnodes", "1", "--nproc-per-node", str(le.nproc_per_node),
                "--max-restarts", str(le.max_restarts), "--monitor-interval", "1"]
    return args + worker_args(start, config_path)


def validate(cfg: RuntimeConfig, le: LaunchEnv | None = None, *, cuda_available: bool | None = None) -> list[str]:
    errors = check_layout(cfg.spec, cuda_available=cuda_available) + check_pretrained(cfg.spec)
    if le is not None:
        world = le.world_size if le.direct else le.nnodes * le.nproc_per_node
        if world != cfg.spec.nodes * cfg.spec.procs_per_node:
            errors.append(f"nodes: the environment provides {world} ranks ({le.source}: {le.nnodes} nodes × "
                          f"{le.nproc_per_node}) but the spec asks nodes {cfg.spec.nodes} × procsPerNode "
                          f"{cfg.spec.procs_per_node}")
    return errors


def _sigint_as_sigterm(signum, frame):  # noqa: ARG001
    """Ctrl-C is a preemption too: torchrun forwards the signal it got, and workers checkpoint on
    SIGTERM only (SIGINT would raise KeyboardInterrupt in them)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    raise SignalException(f"Process {os.getpid()} got SIGINT (handled as SIGTERM)", sigval=signal.SIGTERM)


def _stop_plan(grace: float):
    """Without workers (config, imports, rendezvous) there is nothing to checkpoint: stop at once,
    even if the main thread is blocked in C. With workers: one escalation step past the agent."""
    def plan() -> tuple[float, str]:
        if not descendants(os.getpid()):
            return 0.0, "no worker has started yet (setup or rendezvous), so there is nothing to checkpoint"
        return escalation(2, grace), "its workers did not stop; killing them"
    return plan


def _arm_early_stop() -> StopWatchdog:
    """First thing: in a pod this process is PID 1, which the kernel spares every signal it has no
    handler for, so without one a SIGTERM during setup or rendezvous would wait for the kubelet's
    SIGKILL. Started by ``phalanx local``, this process dies with it (SIGTERM)."""
    parent = parent_pid_from_env()
    if parent is not None:
        die_with_parent(signal.SIGTERM, parent)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, exit_preempted)
    watchdog = StopWatchdog(0, name="launcher", signals=(signal.SIGTERM, signal.SIGINT),
                            on_expire=lambda: kill_pids(descendants(os.getpid())), plan=_stop_plan(stop_grace()))
    watchdog.start()
    return watchdog


def _prepare_torchrun() -> None:
    """Workers die with this process (they get ``$PHALANX_PARENT_PID``); the agent waits one
    escalation step past the workers' grace before SIGKILL and forwards SIGTERM (SIGINT as SIGTERM)."""
    os.environ[ENV_PARENT_PID] = str(os.getpid())
    os.environ.setdefault(runtime_env.ENV_AGENT_SHUTDOWN_TIMEOUT, str(int(escalation(1, stop_grace()))))
    os.environ[runtime_env.ENV_AGENT_SIGNALS] = AGENT_SIGNALS
    signal.signal(signal.SIGINT, _sigint_as_sigterm)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="phalanx-runtime", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=None, help=f"runtime config JSON (default ${ENV_CONFIG_PATH} or {default_config_path()})")
    ap.add_argument("--check", action="store_true", help="validate the config and layout, start nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the torchrun command, start nothing")
    args = ap.parse_args(argv)
    timeline = StartupTimeline.for_launcher()
    timeline.mark(StartupPhase.LAUNCHER)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    watchdog = _arm_early_stop()
    try:
        return _run(args, timeline)
    except Exception as exc:  # the rendezvous, torchrun itself, a direct-mode worker: say why
        if getattr(exc, "sigval", None) is None:  # torchrun's SignalException is a stop, no failure
            report_exception(exc, source=ErrorSource.LAUNCHER)
        raise
    finally:
        watchdog.stop()


def _invalid(lines: list[str]) -> int:
    """Nothing started: say why on stderr and in the termination message; a permanent failure."""
    print("phalanx-runtime: invalid job, nothing started:", file=sys.stderr)
    for line in lines:
        print(f"  - {line}", file=sys.stderr)
    write_report(invalid_job(lines))
    return EXIT_INVALID


def _run(args: argparse.Namespace, timeline: StartupTimeline) -> int:
    config_path = args.config or default_config_path()
    try:
        cfg = load_config(config_path)
    except Exception as e:  # noqa: BLE001 — any unreadable config is a permanent error
        print(f"phalanx-runtime: cannot read config {config_path}: {e}", file=sys.stderr)
        write_report(invalid_job([f"cannot read config {config_path}: {type(e).__name__}: {e}"]))
        return EXIT_INVALID
    import torch

    le = resolve_env(cfg.spec, job_name=cfg.name)
    errors = validate(cfg, le, cuda_available=torch.cuda.is_available())
    if errors:
        return _invalid(errors)
    if args.check:
        print(f"ok: world {cfg.spec.nodes * cfg.spec.procs_per_node}, mesh (pp, dp_replicate, dp_shard, tp) = {cfg.layout.shape}")
        return 0

    from phalanx_runtime.distributed.process_group import default_backend

    os.environ[runtime_env.ENV_BACKEND] = default_backend()
    os.environ[ENV_CONFIG_PATH] = os.path.abspath(config_path)
    os.environ.setdefault(ENV_JOB_NAME, cfg.name)
    os.environ.setdefault(ENV_PYTHONUNBUFFERED, "1")
    timeline.mark(StartupPhase.AGENT)
    os.environ.update(timeline.to_env())  # the workers' start-up timeline goes on from here
    if le.direct:
        os.environ.update({runtime_env.ENV_RANK: str(le.rank), ENV_WORLD_SIZE: str(le.world_size),
                           runtime_env.ENV_LOCAL_RANK: str(le.local_rank), ENV_MASTER_ADDR: le.master_addr,
                           ENV_MASTER_PORT: str(le.master_port)})
        if args.dry_run:
            print(f"direct worker rank {le.rank}/{le.world_size}")
            return 0
        from phalanx_runtime.train import main as worker_main

        return worker_main(["--config", config_path])

    start = worker_start(os.environ)
    targs = torchrun_args(le, os.path.abspath(config_path), start)
    if args.dry_run:
        print("torchrun " + " ".join(targs))
        return 0
    if start is WorkerStart.FORKSERVER:
        preload_forkserver(preload_modules(cfg))
    log.info("launching %d workers on node %d/%d (%s): torchrun %s", le.nproc_per_node, le.node_rank, le.nnodes,
             le.source, " ".join(targs))
    # the start count lives on the scratch emptyDir, not in HOME: a job may point HOME at a shared volume
    env = dict(os.environ)
    watcher = inplace.watch_requests(env, SCRATCH_MOUNT_PATH, _restart_now)
    inplace.wait_backoff(env, watcher)
    return _torchrun(targs)


def _restart_now(asked: int) -> None:  # noqa: ARG001 - the count is logged by the watcher
    """The operator asked this pod to restart in place: the workers (hung, or waiting on a peer
    that is gone) are killed and the launcher exits with the in-place code at once."""
    kill_pids(descendants(os.getpid()))
    logging.shutdown()
    os._exit(inplace.EXIT_RESTART_IN_PLACE)


def _peer_errors() -> tuple[type[BaseException], ...]:
    """The agent's errors that mean the other nodes went away: the c10d store's, the rendezvous'."""
    from torch.distributed import DistError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    return DistError, RendezvousError, ConnectionError, TimeoutError


def _torchrun(targs: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    peer_errors = _peer_errors()

    _prepare_torchrun()
    try:
        torchrun_main(targs)
    except SignalException as e:
        # The agent forwarded the signal to the workers and waited for them (checkpoint on SIGTERM).
        log.warning("stopped by signal %s; workers were asked to checkpoint and exit", e.sigval)
        return 128 + int(e.sigval)
    except ChildFailedError as e:
        codes = {f.exitcode for f in getattr(e, "failures", {}).values()}
        if codes == {EXIT_PREEMPTED}:
            log.warning("workers stopped after a SIGTERM checkpoint (exit %d)", EXIT_PREEMPTED)
            return EXIT_PREEMPTED
        log.error("worker failed: %s", e.format_msg() if hasattr(e, "format_msg") else e)
        named = child_failure(getattr(e, "failures", {}))
        if named is not None:
            write_report(named[0], replace=named[1])
        report = inplace.read_report(termination_log())
        return inplace.exit_code_after(codes, report, EXIT_WORKER_FAILED)
    except peer_errors as e:
        # the agent's rendezvous or store broke: a peer restarted or is gone; the gang starts over
        log.error("rendezvous with the other nodes failed (%s: %s); restarting in place", type(e).__name__, e)
        return inplace.EXIT_RESTART_IN_PLACE
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
