"""Every key, label, annotation, gate, finalizer, env name, path, port, timing, condition type and
reason Phalanx uses, grouped by kind. One place only: the operator↔runtime contract among them
lives in ``phalanx_common.contract`` (the package both import) and is re-exported here.

Each reason enum's members are explained (meaning, what to do, where they appear) in
phalanx/reasons.py, which the docs' reasons tables are generated from.
"""

from __future__ import annotations

from enum import StrEnum

# The operator↔runtime contract (env names, shared files, the runtime's error report, stopping):
# defined in the package both import, re-exported here under the names the operator uses.
from phalanx_common.contract import (  # noqa: F401
    ANNOTATION_RESTART_REQUEST,
    COLLECT_MODULE,
    DEFAULT_MASTER_PORT,
    DEFAULT_TERMINATION_LOG,
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_URI,
    ENV_CONFIG_PATH,
    ENV_GROUP_RANK,
    ENV_HOROVOD_CONTROLLER,
    ENV_HOROVOD_CPU_OPERATIONS,
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
    ENV_JOB_NAME,
    ENV_JOB_UID,
    ENV_LOCAL_RANK,
    ENV_LOCAL_WORLD_SIZE,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_METRICS_PORT,
    ENV_NNODES,
    ENV_NODE_NAME,
    ENV_NODE_RANK,
    ENV_NPROC_PER_NODE,
    ENV_OMP_NUM_THREADS,
    ENV_PARENT_PID,
    ENV_PET_MASTER_ADDR,
    ENV_PET_MASTER_PORT,
    ENV_PET_MAX_RESTARTS,
    ENV_PET_NNODES,
    ENV_PET_NODE_RANK,
    ENV_PET_NPROC_PER_NODE,
    ENV_PET_RDZV_ENDPOINT,
    ENV_PET_RDZV_ID,
    ENV_PG_TIMEOUT_SECONDS,
    ENV_PROGRESS_COLLECTOR,
    ENV_PROGRESS_FILE,
    ENV_PROGRESS_PATTERNS,
    ENV_PROGRESS_PORT,
    ENV_PYTHONUNBUFFERED,
    ENV_RANK,
    ENV_RESTART_ATTEMPT,
    ENV_RESTART_BACKOFF_SECONDS,
    ENV_RESTART_BASE,
    ENV_RESTART_MAX_BACKOFF_SECONDS,
    ENV_RESTART_REQUEST_FILE,
    ENV_RESULT_FILE,
    ENV_START_TIME,
    ENV_STARTUP_MARKS,
    ENV_STOP_GRACE_SECONDS,
    ENV_TERMINATION_LOG,
    ENV_WORLD_SIZE,
    EXIT_PREEMPTED,
    EXIT_RESTART_IN_PLACE,
    HOROVOD_GLOO_TIMEOUT_SECONDS,
    LATEST_CHECKPOINT_FILE,
    LAUNCH_COUNT_FILE,
    MAX_REPORTED_METRICS,
    METRIC_LABEL_JOB,
    METRIC_LABEL_NAMESPACE,
    METRIC_NAME_PATTERN,
    METRICS_LOG_FILE,
    PHASES_WITHOUT_STEPS,
    PODINFO_MOUNT_PATH,
    PROGRESS_PHASE_EXPORTING,
    PROGRESS_PHASE_PREPARING,
    REPORT_KEY_ERROR,
    REPORT_PHASE_FAILED,
    REPORT_TYPE_INVALID_JOB,
    REPORT_TYPE_WORKER_FAILED,
    RESTART_REQUEST_FILE,
    RUNTIME_CONFIG_DIR,
    RUNTIME_CONFIG_FILE,
    SCRATCH_MOUNT_PATH,
    SLURM_NTASKS,
    STOP_ESCALATION_SECONDS,
    STOP_GRACE_SECONDS,
    Collector,
    ErrorKey,
    ErrorSource,
    ProgressKey,
    StartupPhase,
)

# --- API identity: the CRDs' group, version, kinds and names ------------------------------------
GROUP = "phalanx.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainingJob"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
SHORT_NAMES = ["tj"]
CATEGORIES = ["all", "phalanx"]
CRD_NAME = f"{PLURAL}.{GROUP}"
# TrainingSweep → trial TrainingJobs (api/sweep.py, sweep/, docs/sweep.md).
SWEEP_KIND = "TrainingSweep"
SWEEP_PLURAL = "trainingsweeps"
SWEEP_SINGULAR = "trainingsweep"
SWEEP_SHORT_NAMES = ["tsw"]
SWEEP_CRD_NAME = f"{SWEEP_PLURAL}.{GROUP}"
# NodeQuarantine: a node kept out of new placements (api/quarantine.py, docs/health.md). Cluster-scoped.
QUARANTINE_KIND = "NodeQuarantine"
QUARANTINE_PLURAL = "nodequarantines"
QUARANTINE_SINGULAR = "nodequarantine"
QUARANTINE_SHORT_NAMES = ["nq"]
QUARANTINE_CRD_NAME = f"{QUARANTINE_PLURAL}.{GROUP}"

# --- Phalanx's labels, annotations, gate and finalizer -------------------------------------------
# Labels on every child object.
LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_NODE_RANK = f"{GROUP}/node-rank"
LABEL_RESTART_ATTEMPT = f"{GROUP}/restart-attempt"
LABEL_ROLE = f"{GROUP}/role"  # spec.roles jobs: worker, or the role of spec.roles
LABEL_ROLE_INDEX = f"{GROUP}/role-index"  # the pod's index within its role
LABEL_COMPONENT = f"{GROUP}/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "phalanx-operator"
# Values of LABEL_COMPONENT.
COMPONENT_WORKER = "worker"
COMPONENT_SERVICE = "rendezvous"
COMPONENT_CONFIG = "config"
COMPONENT_NETWORK = "network-policy"
# On each trial TrainingJob of a sweep.
LABEL_SWEEP = f"{GROUP}/sweep"  # its sweep's name
LABEL_TRIAL = f"{GROUP}/trial"  # its index in the sweep
ANNOTATION_TRIAL_PARAMETERS = f"{GROUP}/trial-parameters"  # the trial's assignment, JSON
ANNOTATION_SPEC_HASH = f"{GROUP}/spec-hash"
ANNOTATION_KOPF_PREFIX = GROUP  # kopf's progress/diff-base annotations live under phalanx.dev/
# Scheduling gate that holds a gang until the whole gang is placed.
GANG_SCHEDULING_GATE = f"{GROUP}/gang"
# Finalizer (kopf's own finalizer is renamed to ours).
FINALIZER = f"{GROUP}/finalizer"

# --- Other projects' keys and API groups (Kubernetes, Multus, gang backends) ---------------------
LABEL_HOSTNAME = "kubernetes.io/hostname"
# Multus secondary networks (SR-IOV / RDMA) on the pod.
ANNOTATION_MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
# Volcano.
VOLCANO_API_VERSION = "scheduling.volcano.sh/v1beta1"
VOLCANO_SCHEDULER_NAME = "volcano"
ANNOTATION_VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"
# scheduler-plugins coscheduling.
COSCHEDULING_API_VERSION = "scheduling.x-k8s.io/v1alpha1"
COSCHEDULING_SCHEDULER_NAME = "scheduler-plugins-scheduler"
LABEL_COSCHEDULING_POD_GROUP = "scheduling.x-k8s.io/pod-group"
# Kueue (plain-pod groups).
LABEL_KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
ANNOTATION_KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
ANNOTATION_KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
# Kubernetes Workload API (KEP-4671).
WORKLOAD_API_GROUP = "scheduling.k8s.io"
WORKLOAD_POD_GROUP_NAME = "workers"

# --- Names inside a worker pod: container, ports, volumes, roles, framework tasks ----------------
CONTAINER_NAME = "trainer"
# Container port names (the job's NetworkPolicy opens them by name: hostNetwork jobs move them).
PORT_NAME_RENDEZVOUS = "rendezvous"
PORT_NAME_PROGRESS = "progress"
PORT_NAME_METRICS = "metrics"
PORT_NAME_HOROVOD = "horovod"
# The operator's own volumes in every worker pod (users' volumes may not take these names).
VOLUME_CHECKPOINT = "checkpoint"
VOLUME_STORAGE_CREDENTIALS = "phalanx-storage-credentials"  # checkpoint.storage's Secret, gs:// key file
VOLUME_CONFIG = "phalanx-config"
VOLUME_SCRATCH = "phalanx-scratch"
SHM_VOLUME_NAME = "dshm"
TOPO_FILE_VOLUME_NAME = "nccl-topo"
DEFAULT_SHM_SIZE = "2Gi"

# checkpoint.storage: the env the cloud SDKs (botocore, google-auth) read, and the Secret's keys.
ENV_AWS_ENDPOINT_URL_S3 = "AWS_ENDPOINT_URL_S3"
ENV_AWS_REGION = "AWS_REGION"
ENV_AWS_DEFAULT_REGION = "AWS_DEFAULT_REGION"
AWS_SECRET_KEYS = (("AWS_ACCESS_KEY_ID", False), ("AWS_SECRET_ACCESS_KEY", False), ("AWS_SESSION_TOKEN", True))  # (key, optional)
ENV_GOOGLE_APPLICATION_CREDENTIALS = "GOOGLE_APPLICATION_CREDENTIALS"
GCS_KEY_FILE = "key.json"
STORAGE_CREDENTIALS_MOUNT_PATH = "/phalanx/storage-credentials"  # under PHALANX_MOUNT_ROOT: reserved
# The runtime image's non-root user (USER in runtime/Dockerfile and hack/kind/app-images.sh);
# every worker pod runs as it, with this fsGroup so shared volumes are writable.
RUNTIME_UID = 1000
RUNTIME_GID = 1000
DNS_POLICY_HOST_NETWORK = "ClusterFirstWithHostNet"
# Heterogeneous gangs (spec.roles): the workers' role name.
ROLE_WORKER = "worker"
# spec.framework tensorflow: the task types of TF_CONFIG.
TF_TASK_WORKER = "worker"
TF_TASK_CHIEF = "chief"
TF_TASK_EVALUATOR = "evaluator"  # not in the cluster spec: it only reads checkpoints
HOROVOD_GLOO = "gloo"  # spec.framework horovod: the controller (HOROVOD_CONTROLLER)
# A pod that requests no GPU sees none, even on a GPU node whose runtime would show it all (the
# NVIDIA container toolkit's default for images that set NVIDIA_VISIBLE_DEVICES=all).
NVIDIA_NO_DEVICES = "void"

# --- Ports -----------------------------------------------------------------------------------------
PROGRESS_PORT = 29600
METRICS_PORT = 29601
# spec.framework horovod (frameworks/horovod.py, docs/horovod.md): Horovod's gloo controller meets at an
# HTTP rendezvous server in pod 0 (phalanx_runtime.horovod_launch) on its own fixed port, declared
# by every horovod pod and published by the headless Service.
HOROVOD_RENDEZVOUS_PORT = 29502
# hostNetwork jobs get a per-job block of ports (rendezvous, progress, metrics) from this range.
HOST_NETWORK_PORT_RANGE = (20000, 29999)
# The operator process.
DEFAULT_LIVENESS_PORT = 8080
DEFAULT_OPERATOR_METRICS_PORT = 9090

# --- File paths, mounts and ConfigMap keys ----------------------------------------------------------
RUNTIME_CONFIG_KEY = RUNTIME_CONFIG_FILE
# spec.framework deepspeed: the rendered DeepSpeed config, a second key of the job's ConfigMap.
DEEPSPEED_CONFIG_FILE = "deepspeed.json"
SHM_MOUNT_PATH = "/dev/shm"
# Writable scratch (HOME, caches, TMPDIR) on an emptyDir: pods may run with a read-only image.
PHALANX_MOUNT_ROOT = "/phalanx"
# rank 0 writes its final progress JSON here (the pod's terminationMessagePath) for the operator.
# Rank 0 appends one JSON line per step here, in the checkpoint dir (`phalanx plot` reads it).
# The operator pod's own namespace when POD_NAMESPACE is unset.
SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

# --- Env names ---------------------------------------------------------------------------------------
# Injected into every worker pod (Kubeflow / torchrun names, so users recognise them).
# The operator's contract with the runtime: users' env may not set PHALANX_*.
ENV_RESERVED_PREFIX = "PHALANX_"
ENV_DEEPSPEED_CONFIG = "PHALANX_DEEPSPEED_CONFIG"  # framework deepspeed only
ENV_ROLE = "PHALANX_ROLE"
ENV_ROLE_INDEX = "PHALANX_ROLE_INDEX"
ENV_ROLE_REPLICAS = "PHALANX_ROLE_REPLICAS"
ENV_ROLES = "PHALANX_ROLES"  # "worker=4,chief=1,ps=2": every role and its replicas
ENV_SUBDOMAIN = "PHALANX_SUBDOMAIN"  # "<service>.<namespace>.svc": <job>-<role>-<i>.$PHALANX_SUBDOMAIN
ENV_NAMESPACE = "PHALANX_NAMESPACE"
ENV_POD_NAME = "PHALANX_POD_NAME"
# The job's uid, so the runtime records which job wrote a checkpoint and says when it resumes
# one written by an earlier job of the same name.
# rank 0 writes its final progress JSON to this path (DEFAULT_TERMINATION_LOG) for the operator.
# Process-group timeout in seconds (network profile watchdog.pgTimeoutSeconds): init_process_group
# and every group the runtime creates (device-mesh dims, the checkpointer's). Unset: torch's default.
# The pid a runtime process expects as its parent; it dies with that parent (PR_SET_PDEATHSIG).
ENV_NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"  # set to NVIDIA_NO_DEVICES in pods without GPUs
# spec.framework tensorflow: the TensorFlow cluster spec and this pod's task, rendered per pod
# ({"cluster": {"worker": [host:port, ...]}, "task": {"type": "worker", "index": rank}}).
ENV_TF_CONFIG = "TF_CONFIG"
# spec.framework horovod: the env horovodrun would have set.
# The operator pod's own name and namespace (downward API): lease identity and namespace.
ENV_OPERATOR_POD_NAME = "POD_NAME"
ENV_OPERATOR_POD_NAMESPACE = "POD_NAMESPACE"

# --- Env no job may set (api/kubetypes.py EnvVar, network.ncclEnv) ----------------------------------
# Every HOROVOD_* variable the operator or the launcher sets (spec.env may not set them).
HOROVOD_RENDERED_ENV = (
    ENV_HOROVOD_RENDEZVOUS_ADDR, ENV_HOROVOD_RENDEZVOUS_PORT, ENV_HOROVOD_CONTROLLER, ENV_HOROVOD_CPU_OPERATIONS,
    ENV_HOROVOD_GLOO_TIMEOUT, ENV_HOROVOD_HOSTNAME, ENV_HOROVOD_RANK, ENV_HOROVOD_SIZE, ENV_HOROVOD_LOCAL_RANK,
    ENV_HOROVOD_LOCAL_SIZE, ENV_HOROVOD_CROSS_RANK, ENV_HOROVOD_CROSS_SIZE,
)
# The rendezvous variables every worker pod gets (render/pod.py); a job's env comes after them
# and would win. PYTHONUNBUFFERED and the scratch paths (HOME, TMPDIR, caches) stay the job's to
# change; TF_CONFIG and HOROVOD_* are reserved only under their framework (api/types.py, horovod.py).
RENDEZVOUS_ENV = (
    ENV_MASTER_ADDR, ENV_MASTER_PORT, ENV_WORLD_SIZE, ENV_NNODES, ENV_NODE_RANK, ENV_NPROC_PER_NODE,
    ENV_PET_MASTER_ADDR, ENV_PET_MASTER_PORT, ENV_PET_NNODES, ENV_PET_NODE_RANK, ENV_PET_NPROC_PER_NODE,
    ENV_PET_RDZV_ENDPOINT, ENV_PET_RDZV_ID, ENV_PET_MAX_RESTARTS,
)
# Env the node's container runtime reads from the container's spec to decide which devices and
# driver files to inject: a grant, not a filter. In env-var mode the NVIDIA container toolkit
# shows a pod every GPU of its node for NVIDIA_VISIBLE_DEVICES=all, whatever it requested, and
# reads the other NVIDIA_* (DRIVER_CAPABILITIES, REQUIRE_*, MIG_*, IMEX_CHANNELS, ...) likewise;
# the AMD container runtime (AMD_VISIBLE_DEVICES), habana-container-runtime (HABANA_VISIBLE_DEVICES,
# HABANA_VISIBLE_MODULES), the Neuron OCI hook (AWS_NEURON_VISIBLE_DEVICES) and Ascend Docker
# Runtime (ASCEND_VISIBLE_DEVICES, its mount and vNPU options) do the same. Only the device plugin
# may set them. Not here: the process-level filters (CUDA_VISIBLE_DEVICES, ROCR_/HIP_VISIBLE_DEVICES,
# NEURON_RT_VISIBLE_CORES, TPU_VISIBLE_CHIPS, ASCEND_RT_VISIBLE_DEVICES, ZE_AFFINITY_MASK) narrow
# what a process uses among the devices its container already has.
ENV_DEVICE_GRANT_PREFIXES = ("NVIDIA_",)
ENV_DEVICE_GRANT_NAMES = (
    "AMD_VISIBLE_DEVICES", "HABANA_VISIBLE_DEVICES", "HABANA_VISIBLE_MODULES", "AWS_NEURON_VISIBLE_DEVICES",
    "ASCEND_VISIBLE_DEVICES", "ASCEND_RUNTIME_OPTIONS", "ASCEND_RUNTIME_MOUNTS", "ASCEND_ALLOW_LINK",
    "ASCEND_VNPU_SPECS",
)

# --- Resources and topology ----------------------------------------------------------------------
RESOURCE_GPU = "nvidia.com/gpu"
RESOURCE_CPU = "cpu"
RESOURCE_MEMORY = "memory"
RESOURCE_PODS = "pods"
RESOURCE_EFA = "vpc.amazonaws.com/efa"
TOPOLOGY_UNKNOWN_DOMAIN = "unknown"  # the domain of a node without the level's label

# --- Metric labels -----------------------------------------------------------------------------------
# Prometheus label keys of per-job series (operator and runtime). Not `job`: Prometheus sets
# `job` on every target (the scrape job), so an exported `job` would be renamed `exported_job`.

# --- Timings and limits ------------------------------------------------------------------------------
DEFAULT_POD_CREATE_CONCURRENCY = 32
# Stopping (runtime/phalanx_runtime/lifetime.py, docs/runtime.md "Stopping and preemption"): after
# SIGTERM a worker has STOP_GRACE_SECONDS to reach a step boundary and checkpoint; then its watchdog
# ends it (exit 143, no checkpoint, the reason in its log). Each layer above waits one
# STOP_ESCALATION_SECONDS more: torchrun's agent SIGKILLs its workers at +1, the launcher exits at
# +2, `phalanx local` SIGKILLs what is left at +3 — all inside the pod's 120 s grace period.
LOCAL_STOP_GRACE_SECONDS = 30  # `phalanx local`
# Leader election (leader.py): one coordination.k8s.io Lease; only its holder reconciles. Timings
# as client-go's defaults: a holder that has not renewed for RENEW_DEADLINE stops (exits); a
# standby takes over LEASE_DURATION after it last saw the lease change.
LEADER_LEASE_NAME = "phalanx-operator-leader"
LEADER_LEASE_DURATION_SECONDS = 15.0
LEADER_RENEW_DEADLINE_SECONDS = 10.0
LEADER_RETRY_PERIOD_SECONDS = 2.0
# SIGTERM to exit at most this long (the chart's terminationGracePeriodSeconds leaves 5 s more);
# after kopf stops on its own, threads get this long before the process ends regardless.
SHUTDOWN_GRACE_SECONDS = 25.0
EXIT_AFTER_STOP_SECONDS = 10.0
# Namespaced mode: the cluster-wide pod reflector's watch length and page size.
POD_REFLECTOR_WATCH_SECONDS = 300
POD_REFLECTOR_PAGE_SIZE = 500

# --- Why a pod failed (runtime/phalanx_runtime/failure_report.py → lifecycle/failure_cause.py) ------
# Every training container's termination message: what the process wrote to its
# terminationMessagePath, else (a failed container that wrote nothing) the last lines of its log.
TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
TERMINATION_MESSAGE_MAX_BYTES = 4096  # what the kubelet keeps of one container's message
# A failing runtime process writes {"phase": "Failed", "error": {<ErrorKey>: ...}} there.
# The launcher's own report types (its other reports carry the exception's type).






class FailureCategory(StrEnum):
    """What kind of failure ended a pod (status.lastFailure.category, and the Failed and Restarting
    messages): lifecycle/failure_cause.py classifies the pod's exit and termination message."""

    OUT_OF_MEMORY = "OutOfMemory"  # OOMKilled, exit 137 (SIGKILL), a CUDA or host allocation failure
    PERMISSION_DENIED = "PermissionDenied"  # EACCES/EPERM, a read-only file system
    COMMUNICATION = "CommunicationError"  # NCCL, gloo, c10d store or rendezvous, a peer gone
    MISSING_FILE_OR_MODULE = "MissingFileOrModule"  # an import error, a missing file or executable
    INVALID_CONFIG = "InvalidConfig"  # the runtime refused its config before starting
    USER_CODE = "UserCodeError"  # any other exception with a traceback
    INFRASTRUCTURE = "Infrastructure"  # evicted, preempted, the node or the pod lost
    HANG = "Hang"  # no step progress for hangTimeoutSeconds
    PREFLIGHT = "Preflight"  # the gang's pre-flight check (all-reduce, device) failed on this rank's node
    UNKNOWN = "Unknown"


class RestartMode(StrEnum):
    """How the gang last restarted (status.lastRestartMode): lifecycle/inplace.py, restart.py."""

    IN_PLACE = "InPlace"  # every pod's containers restarted in place (Kubernetes RestartAllContainers)
    RECREATE = "Recreate"  # every pod deleted and the gang created again as a new attempt
    REPLACE_NODE = "ReplaceNode"  # one lost node's pod recreated on a spare node; the others restarted in place


# The kubelet feature that restarts a pod's containers in place (node.status.declaredFeatures).
FEATURE_RESTART_ALL_CONTAINERS = "RestartAllContainersOnContainerExits"
RESTART_RULE_ACTION = "RestartAllContainers"
VOLUME_PODINFO = "phalanx-podinfo"


# --- Condition types -------------------------------------------------------------------------------


class ConditionType(StrEnum):
    """The condition types of a TrainingJob's (and a TrainingSweep's) status.conditions; each one's
    meaning: phalanx/reasons.py CONDITIONS."""

    VALID = "Valid"
    CREATED = "Created"
    SCHEDULABLE = "Schedulable"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    RECONCILED = "Reconciled"  # False while the operator cannot decide the job (ReconcileError)
    LOSS_NOT_FINITE = "LossNotFinite"  # rank 0 reported a NaN/infinite loss (a diverged run)
    RESUMED_FROM_PREDECESSOR = "ResumedFromPredecessor"  # resumed another job uid's checkpoint


# The module-level names code outside lifecycle/ uses (C.COND_*): the same members.
COND_VALID = ConditionType.VALID
COND_CREATED = ConditionType.CREATED
COND_SCHEDULABLE = ConditionType.SCHEDULABLE
COND_RUNNING = ConditionType.RUNNING
COND_RESTARTING = ConditionType.RESTARTING
COND_SUSPENDED = ConditionType.SUSPENDED
COND_SUCCEEDED = ConditionType.SUCCEEDED
COND_FAILED = ConditionType.FAILED
COND_RECONCILED = ConditionType.RECONCILED
COND_LOSS_NOT_FINITE = ConditionType.LOSS_NOT_FINITE
COND_RESUMED_FROM_PREDECESSOR = ConditionType.RESUMED_FROM_PREDECESSOR

# --- Reasons (conditions, Events, status.trials[].reason) ------------------------------------------


class Reason(StrEnum):
    """Every reason the operator writes into a condition or an Event (a str: it compares and
    serialises as its value). Failure reasons taken from pods (Evicted, exited, ...) pass through
    as they are; the planner's and the backends' reasons are the enums below. Each member's
    meaning and fix: phalanx/reasons.py (a unit test fails for a member without them)."""

    # spec
    INVALID_SPEC = "InvalidSpec"
    VALIDATED = "Validated"
    RECONCILED = "Reconciled"
    # lifecycle phases
    PENDING = "Pending"
    CREATING = "Creating"
    CREATED = "Created"
    CREATING_PODS = "CreatingPods"
    PODS_CREATED = "PodsCreated"
    WAITING_FOR_OLD_PODS = "WaitingForOldPods"
    SCHEDULING = "Scheduling"
    RUNNING = "Running"
    ALL_NODES_RUNNING = "AllNodesRunning"
    SUCCEEDED = "Succeeded"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    # the gang
    GANG_INCOMPLETE = "GangIncomplete"
    GANG_COMPLETE = "GangComplete"
    PLACED = "Placed"
    GATES_LIFTED = "GatesLifted"
    GANG_TIMEOUT = "GangTimeout"
    REPLANNING = "Replanning"
    CREATE_INTERRUPTED = "PinnedCreateInterrupted"  # part of a pinned gang exists: recreated behind the gate
    RESIZING = "Resizing"
    # failures and restarts
    RESTARTING = "Restarting"  # a whole-gang restart (counted by phalanx_gang_restarts_total)
    PERMANENT_FAILURE = "PermanentFailure"
    MAX_RESTARTS_EXCEEDED = "MaxRestartsExceeded"
    NODE_LOST = "NodeLost"
    POD_LOST = "PodLost"
    HANG = "Hang"
    EXITED = "exited"  # a pod's trainer exited with a code (the message has it)
    POD_FAILED = "Failed"  # a pod failed without a reason or an exit code of its own
    FORCE_DELETED = "ForceDeleted"  # a pod stuck terminating on a lost node
    RESTARTED_IN_PLACE = "RestartedInPlace"  # the gang's containers restarted on the same pods and nodes
    RESTART_REQUESTED = "RestartRequested"  # the operator asked the pods to restart in place (a hang, a peer)
    NODE_REPLACED = "NodeReplaced"  # one node-rank moved to a spare node in its domain (lifecycle/replace_node.py)
    NODE_NOT_REPLACED = "NodeNotReplaced"  # a lost or quarantined node could not be replaced alone: why
    # refusals and errors (lifecycle/refusals.py)
    CREATE_REFUSED = "CreateRefused"  # retryable: quota, a class or account not there yet
    CREATE_REJECTED = "CreateRejected"  # permanent: invalid, or forbidden by admission
    RECONCILE_ERROR = "ReconcileError"
    # rank 0's reports (lifecycle/progress.py)
    LOSS_NOT_FINITE = "LossNotFinite"
    LOSS_FINITE = "LossFinite"
    RESUMED_FROM_PREDECESSOR = "ResumedFromPredecessor"
    RESUMED_FROM_CHECKPOINT = "ResumedFromCheckpoint"  # a command job's script resumed at a step
    # node health (nodehealth.py): Events on the Node and on the job whose failure tipped it
    NODE_QUARANTINED = "NodeQuarantined"
    NODE_QUARANTINE_RELEASED = "NodeQuarantineReleased"


class UnschedulableReason(StrEnum):
    """The native planner's reasons for Schedulable=False (gang/planner.py)."""

    INSUFFICIENT = "Insufficient"  # fewer feasible nodes than the gang needs
    TOPOLOGY_REQUIRED = "TopologyRequired"  # no domain of the required level holds the gang
    INVALID_REQUEST = "InvalidRequest"  # the request names an unknown level, or no nodes
    QUEUED = "Queued"


class NodeExclusion(StrEnum):
    """Why the native planner left a node out of a gang (gang/planner.py): the counts per kind in a
    Schedulable=False message ("2 fit (3 excluded: 2 cordoned, 1 too little nvidia.com/gpu)").
    The members with a placeholder are formatted with the resource or the topology level."""

    NOT_READY = "not ready"
    CORDONED = "cordoned"  # spec.unschedulable, and no toleration of node.kubernetes.io/unschedulable
    TAINTED = "tainted"  # a NoSchedule or NoExecute taint the pods do not tolerate
    SELECTOR_MISMATCH = "nodeSelector mismatch"
    TOO_LITTLE = "too little {resource}"  # free after running pods and other gangs' reservations
    OUTSIDE_WORKERS_DOMAIN = "outside the workers' {level}"  # a role's pod, scheduling.topology.required
    QUARANTINED = "quarantined"  # a NodeQuarantine names it (gang/nodehealth.py); running gangs keep it


class QuarantineReason(StrEnum):
    """Why a node is quarantined (NodeQuarantine spec.reason; gang/nodehealth.py)."""

    CONDITION = "Condition"  # a node condition configured as unhealthy is True (health.unhealthyConditions)
    TAINT = "Taint"  # a taint configured as unhealthy (health.unhealthyTaints)
    JOB_EVIDENCE = "JobEvidence"  # jobs' failures were attributed to it health.evidenceThreshold times
    PREFLIGHT = "Preflight"  # a gang's pre-flight check failed on it
    MANUAL = "Manual"  # created by an admin


class KueueReason(StrEnum):
    """The kueue backend's reasons in Schedulable (and Suspended when Kueue takes the gang away),
    backends/kueue.py; where Kueue's Workload or pods carry a reason of their own, that one
    passes through instead of the fallbacks marked so."""

    ADMITTED = "Admitted"
    QUOTA_RESERVED = "QuotaReserved"  # quota held; admission checks pending
    PENDING = "Pending"  # fallback: QuotaReserved=False without a reason
    QUEUED = "Queued"  # the Workload exists; Kueue has not evaluated it
    WAITING = "WaitingForKueue"  # pods gated, no Workload yet
    DEACTIVATED = "Deactivated"  # the Workload's spec.active is false
    EVICTED = "Evicted"  # fallback: Evicted=True without a reason
    STOPPED = "StoppedByKueue"


class WorkloadReason(StrEnum):
    """The workload backend's reasons in Schedulable, from its PodGroup's status
    (backends/workload.py); kube-scheduler's own reason passes through where it gave one."""

    SCHEDULED = "Scheduled"
    UNSCHEDULABLE = "Unschedulable"  # fallback: PodGroupScheduled=False without a reason
    WAITING_FOR_SCHEDULER = "WaitingForScheduler"
    POD_GROUP_MISSING = "PodGroupMissing"
    DISRUPTED = "Disrupted"


class SweepReason(StrEnum):
    """Every reason a TrainingSweep writes into a condition or an Event (sweep/)."""

    INVALID_SPEC = "InvalidSpec"
    VALIDATED = "Validated"
    TRIAL_CREATED = "TrialCreated"
    TRIAL_SUCCEEDED = "TrialSucceeded"
    TRIAL_FAILED = "TrialFailed"
    EARLY_STOPPED = "EarlyStopped"  # the early-stopping rule suspended a trial (checkpoint kept)
    TRIAL_DIVERGED = "TrialDiverged"  # a trial reported a NaN/infinite loss: suspended
    TRIAL_NAME_TAKEN = "TrialNameTaken"  # a TrainingJob of the trial's name exists, not ours
    CREATE_REJECTED = "CreateRejected"  # the API server refused a trial for good
    NEW_BEST = "NewBestTrial"
    TRIALS_RUNNING = "TrialsRunning"
    WAITING_FOR_CAPACITY = "WaitingForCapacity"  # a trial's gang is not placed: no more trials yet
    SWEEP_COMPLETE = "SweepComplete"
    NO_TRIAL_SUCCEEDED = "NoTrialSucceeded"
