"""The operator↔runtime contract: the env names the operator renders into a worker pod (or ``phalanx
local`` sets on a local process) and the runtime reads, the files they share, the runtime's error
report, and how a stop escalates. ``phalanx.constants`` re-exports every name here, so the
operator's code names them all in one place.
"""

from __future__ import annotations

import os
from enum import StrEnum

# Rendezvous: the Kubeflow / torchrun names every worker pod gets, so users recognise them.
DEFAULT_MASTER_PORT = 29500
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_NNODES = "NNODES"
ENV_NODE_RANK = "NODE_RANK"
ENV_NPROC_PER_NODE = "NPROC_PER_NODE"
ENV_PET_MASTER_ADDR = "PET_MASTER_ADDR"
ENV_PET_MASTER_PORT = "PET_MASTER_PORT"
ENV_PET_NNODES = "PET_NNODES"
ENV_PET_NODE_RANK = "PET_NODE_RANK"
ENV_PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
ENV_PET_RDZV_ENDPOINT = "PET_RDZV_ENDPOINT"
ENV_PET_RDZV_ID = "PET_RDZV_ID"
ENV_PET_MAX_RESTARTS = "PET_MAX_RESTARTS"
ENV_PYTHONUNBUFFERED = "PYTHONUNBUFFERED"

# torchrun → each worker (the launcher sets them itself in Slurm direct mode and in spawn.run_ranks;
# `phalanx local` never passes its own caller's values on). Slurm's task count, likewise.
ENV_RANK = "RANK"
ENV_LOCAL_RANK = "LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
ENV_GROUP_RANK = "GROUP_RANK"
SLURM_NTASKS = "SLURM_NTASKS"
ENV_OMP_NUM_THREADS = "OMP_NUM_THREADS"

# The rendered job: the ConfigMap's JSON (render/configmap.py), mounted at RUNTIME_CONFIG_DIR.
RUNTIME_CONFIG_DIR = "/etc/phalanx"
RUNTIME_CONFIG_FILE = "config.json"
ENV_CONFIG_PATH = "PHALANX_CONFIG"

# The job's identity and the pod's attempt. The job's uid, so the runtime records which job wrote
# a checkpoint and says when it resumes one written by an earlier job of the same name.
ENV_JOB_NAME = "PHALANX_JOB_NAME"
ENV_JOB_UID = "PHALANX_JOB_UID"
ENV_RESTART_ATTEMPT = "PHALANX_RESTART_ATTEMPT"
# The pod's node (downward API): the runtime names it when its pre-flight device check fails.
ENV_NODE_NAME = "PHALANX_NODE_NAME"

# Where the runtime writes and listens.
ENV_CHECKPOINT_DIR = "PHALANX_CHECKPOINT_DIR"
# checkpoint.storage: the job's prefix in object storage (<uri>/<namespace>/<job>), where the built-in
# runtime's checkpoints go; PHALANX_CHECKPOINT_DIR is then a pod-local directory (metrics.jsonl).
ENV_CHECKPOINT_URI = "PHALANX_CHECKPOINT_URI"
# rank 0 writes its final progress JSON here (the pod's terminationMessagePath) for the operator
ENV_TERMINATION_LOG = "PHALANX_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
ENV_PROGRESS_PORT = "PHALANX_PROGRESS_PORT"
ENV_METRICS_PORT = "PHALANX_METRICS_PORT"
# rank 0 writes its TrainResult summary here (`phalanx local` reads it)
ENV_RESULT_FILE = "PHALANX_RESULT_FILE"
# Prometheus label keys of per-job series (operator and runtime). Not `job`: Prometheus sets
# `job` on every target (the scrape job), so an exported `job` would be renamed `exported_job`.
METRIC_LABEL_NAMESPACE = "namespace"
METRIC_LABEL_JOB = "trainingjob"
# Rank 0 appends one JSON line per step here, in the checkpoint dir (`phalanx plot` reads it).
METRICS_LOG_FILE = "metrics.jsonl"
# --- Progress from any code (docs/your-code.md) ---
# One record for every job: global rank 0 serves it as JSON on $PHALANX_PROGRESS_PORT (GET /progress)
# and writes the last one to $PHALANX_TERMINATION_LOG at exit. Built-in runtime, the reporting
# client (phalanx_common.report) and the log collectors (phalanx_common.collect) all produce it; the
# operator parses it strictly (phalanx/lifecycle/progress.py). Keys are ProgressKey members.
class ProgressKey(StrEnum):
    PHASE = "phase"
    STEP = "step"
    TOTAL_STEPS = "totalSteps"
    WORLD_SIZE = "worldSize"
    LOSS = "loss"
    TOKENS_PER_SECOND = "tokensPerSecond"
    MFU = "mfu"
    STEP_TIME_SECONDS = "stepTimeSeconds"
    START_TIME = "startTime"
    UPDATED_AT = "updatedAt"
    EPOCH = "epoch"
    METRICS = "metrics"  # {name: finite number}: eval_loss, eval_accuracy, learning_rate, ...
    LAST_CHECKPOINT = "lastCheckpoint"  # {"step", "path", "time"}: the last committed checkpoint
    RESUMED_STEP = "resumedStep"  # the step this attempt's script resumed from (its checkpoint)
    RESUMED_FROM = "resumedFrom"  # built-in runtime: {"uid", "step"} of an earlier job's checkpoint
    STARTUP = "startup"  # built-in runtime: {StartupPhase: seconds since the container started}


# The built-in runtime's start-up timeline, in the order the phases end: each value is the seconds
# from the container's start (the launcher process's start) to the end of that phase.
class StartupPhase(StrEnum):
    LAUNCHER = "launcher"  # the launcher's interpreter and imports, up to its main()
    AGENT = "agent"  # config read and checked, torch imported: torchrun's agent starts
    WORKER = "worker"  # the worker process started (the agents' rendezvous, the forkserver's imports, the fork)
    IMPORTS = "imports"  # the worker's own imports (what the forkserver did not import before the fork)
    PROCESS_GROUP = "processGroup"  # this rank joined the process group (its store)
    MESH = "mesh"  # the device mesh and its groups: the first collective, it waits for the slowest rank
    MODEL = "model"  # model built, initialised (or loaded) and parallelised
    OPTIMIZER = "optimizer"
    DATA = "data"  # data loader and held-out evaluation
    CHECKPOINT = "checkpoint"  # the newest committed checkpoint resumed (if any)
    METRICS = "metrics"  # metrics and the Prometheus endpoint
    FIRST_STEP = "firstStep"  # the first optimizer step done


# The launcher's start (seconds since the epoch) and the ends of its phases (JSON {phase: epoch
# seconds}), for the workers' timeline; set by the launcher, passed to the workers by torchrun.
ENV_START_TIME = "PHALANX_START_TIME"
ENV_STARTUP_MARKS = "PHALANX_STARTUP_MARKS"


# Bounds both sides keep: what a reporter sends and what the operator accepts.
MAX_REPORTED_METRICS = 32
METRIC_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$"

# spec.progress.collector: how a command job's progress is read (the operator renders the env;
# `python3 -m phalanx_common.collect -- <command>` reads it and serves the record).
ENV_PROGRESS_COLLECTOR = "PHALANX_PROGRESS_COLLECTOR"
ENV_PROGRESS_PATTERNS = "PHALANX_PROGRESS_PATTERNS"  # regex collector: a JSON list of patterns
ENV_PROGRESS_FILE = "PHALANX_PROGRESS_FILE"  # jsonl collector: the file the script appends to
COLLECT_MODULE = "phalanx_common.collect"


class Collector(StrEnum):
    CLIENT = "client"  # the script reports itself (phalanx_common.report or a ready-made callback)
    HUGGINGFACE = "huggingface"  # transformers Trainer / TRL log lines and progress bar
    LIGHTNING = "lightning"  # PyTorch Lightning's progress bar
    TORCHTITAN = "torchtitan"  # torchtitan's metrics log line
    DEEPSPEED = "deepspeed"  # DeepSpeed's engine log lines
    REGEX = "regex"  # the job's own patterns, named groups (as Katib's StdOut collector)
    JSONL = "jsonl"  # a JSON-lines metrics file the script appends to


# Checkpoints of a user's script: the reporting client marks one committed by writing this file
# (atomically, by rename) in $PHALANX_CHECKPOINT_DIR; latest_checkpoint() reads it after a restart.
LATEST_CHECKPOINT_FILE = "phalanx-latest-checkpoint.json"

# Process-group timeout in seconds (network profile watchdog.pgTimeoutSeconds): init_process_group
# and every group the runtime creates (device-mesh dims, the checkpointer's). Unset: torch's default.
ENV_PG_TIMEOUT_SECONDS = "PHALANX_PG_TIMEOUT_SECONDS"

# spec.framework horovod (docs/horovod.md): the env horovodrun would have set, rendered by the
# operator, read and completed per process by phalanx_runtime.horovod_launch.
HOROVOD_GLOO_TIMEOUT_SECONDS = 600  # a peer may reach hvd.init() this much later than the first
ENV_HOROVOD_RENDEZVOUS_ADDR = "HOROVOD_GLOO_RENDEZVOUS_ADDR"
ENV_HOROVOD_RENDEZVOUS_PORT = "HOROVOD_GLOO_RENDEZVOUS_PORT"
ENV_HOROVOD_CONTROLLER = "HOROVOD_CONTROLLER"
ENV_HOROVOD_CPU_OPERATIONS = "HOROVOD_CPU_OPERATIONS"
ENV_HOROVOD_GLOO_TIMEOUT = "HOROVOD_GLOO_TIMEOUT_SECONDS"
ENV_HOROVOD_HOSTNAME = "HOROVOD_HOSTNAME"
ENV_HOROVOD_RANK = "HOROVOD_RANK"  # per process: rendered for procsPerNode 1, else set by the launcher
ENV_HOROVOD_SIZE = "HOROVOD_SIZE"
ENV_HOROVOD_LOCAL_RANK = "HOROVOD_LOCAL_RANK"  # per process, like HOROVOD_RANK
ENV_HOROVOD_LOCAL_SIZE = "HOROVOD_LOCAL_SIZE"
ENV_HOROVOD_CROSS_RANK = "HOROVOD_CROSS_RANK"
ENV_HOROVOD_CROSS_SIZE = "HOROVOD_CROSS_SIZE"

# --- Stopping (runtime/phalanx_runtime/lifetime.py, docs/runtime.md "Stopping and preemption") ---
# After SIGTERM a worker has this long to reach a step boundary and checkpoint; then its watchdog
# ends it (exit 143, no checkpoint, the reason in its log). Each layer above waits one
# STOP_ESCALATION_SECONDS more: torchrun's agent SIGKILLs its workers at +1, the launcher exits at
# +2, `phalanx local` SIGKILLs what is left at +3 — all inside the pod's 120 s grace period.
ENV_STOP_GRACE_SECONDS = "PHALANX_STOP_GRACE_SECONDS"
STOP_GRACE_SECONDS = 90  # in pods (render/pod.py TERMINATION_GRACE_SECONDS = 120)
STOP_ESCALATION_SECONDS = 5
# The pid a runtime process expects as its parent; it dies with that parent (PR_SET_PDEATHSIG).
ENV_PARENT_PID = "PHALANX_PARENT_PID"
EXIT_PREEMPTED = 143  # 128 + SIGTERM: stopped, not finished (retryable)

# --- Restart in place (Kubernetes RestartAllContainers; operator/phalanx/lifecycle/inplace.py) ---
# The launcher exits with EXIT_RESTART_IN_PLACE when the gang must start over but the pod may
# stay: a worker killed by a signal, a peer gone (a broken collective or rendezvous), or the
# operator's request. The trainer container's restart rule maps it to RestartAllContainers, so
# the kubelet restarts the pod's containers on the same node (EX_TEMPFAIL: try again).
EXIT_RESTART_IN_PLACE = 75
# The operator asks a pod to restart in place by setting this annotation to the container restart
# count the pod should reach; the pod sees it through a downward-API file.
ANNOTATION_RESTART_REQUEST = "phalanx.dev/restart-request"
ENV_RESTART_REQUEST_FILE = "PHALANX_RESTART_REQUEST_FILE"
# A pod created to replace one on a lost node joins a gang that has restarted in place this many
# times: its own starts count from there, so a request it already matches is not taken.
ENV_RESTART_BASE = "PHALANX_RESTART_BASE"
# The job's failurePolicy.backoffSeconds / maxBackoffSeconds: the kubelet restarts a pod in place
# at once, so the launcher waits the backoff the operator would have waited before recreating.
ENV_RESTART_BACKOFF_SECONDS = "PHALANX_RESTART_BACKOFF_SECONDS"
ENV_RESTART_MAX_BACKOFF_SECONDS = "PHALANX_RESTART_MAX_BACKOFF_SECONDS"
PODINFO_MOUNT_PATH = "/etc/phalanx/podinfo"
# The pod's scratch emptyDir (HOME, TMPDIR and caches point there unless the job's env says
# otherwise); the launcher keeps its start count there, whatever HOME is.
SCRATCH_MOUNT_PATH = "/phalanx/scratch"
RESTART_REQUEST_FILE = "restart-request"
# How many times the launcher started in this pod (kept on the pod's scratch emptyDir, which an
# in-place restart keeps): its own container restart count, to compare a request against.
LAUNCH_COUNT_FILE = ".phalanx-launches"


def stop_grace(env=None, default: float = STOP_GRACE_SECONDS) -> float:
    """Seconds a worker has after SIGTERM to checkpoint (``$PHALANX_STOP_GRACE_SECONDS``)."""
    value = (os.environ if env is None else env).get(ENV_STOP_GRACE_SECONDS)
    return float(value) if value else float(default)


def escalation(level: int, grace: float) -> float:
    """When layer ``level`` gives up: 0 worker, 1 torchrun agent, 2 launcher, 3 ``phalanx local``."""
    return grace + level * STOP_ESCALATION_SECONDS


# --- Progress phases of work that makes no steps ---
# Rank 0 reports these while it prepares data.prepare's token files (before training) or writes the
# in-job Hugging Face export (after it); both can outlast failurePolicy.hangTimeoutSeconds. The
# operator's hang timer does not run while one is reported and starts afresh when it ends.
PROGRESS_PHASE_PREPARING = "Preparing"
PROGRESS_PHASE_EXPORTING = "Exporting"
PHASES_WITHOUT_STEPS = frozenset({PROGRESS_PHASE_PREPARING, PROGRESS_PHASE_EXPORTING})


# --- Why a pod failed (runtime/phalanx_runtime/failure_report.py → lifecycle/failure_cause.py) ---
# A failing runtime process writes {"phase": "Failed", "error": {<ErrorKey>: ...}} to its
# terminationMessagePath.
REPORT_KEY_ERROR = "error"
REPORT_PHASE_FAILED = "Failed"
# The launcher's own report types (its other reports carry the exception's type).
REPORT_TYPE_INVALID_JOB = "InvalidJob"  # it refused its config or layout: nothing started
REPORT_TYPE_WORKER_FAILED = "WorkerFailed"  # a worker ended without a report of its own


class ErrorKey(StrEnum):
    """The keys of the runtime's error report (its ``error`` object)."""

    TYPE = "type"  # the exception's class, e.g. PermissionError
    MESSAGE = "message"  # its message
    CAUSE = "cause"  # "Type: message" of the exception it was raised from, if any
    FRAMES = "frames"  # the innermost frames, "file.py:12 in fn", outermost first
    RANK = "rank"  # the global rank of the process that failed, when known
    SOURCE = "source"  # ErrorSource


class ErrorSource(StrEnum):
    WORKER = "worker"  # a training process's own exception
    LAUNCHER = "launcher"  # the pod's launcher: its own error, or a worker that died without a report
