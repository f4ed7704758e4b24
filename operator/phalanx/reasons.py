"""What each condition type and reason means and what to do about it: the one source of the
reasons and conditions tables in the docs (phalanx/docstables.py fills them; `make crds-check`
fails when a doc's table drifted). Every member of the reason enums of phalanx/constants.py needs
an entry here (tests/unit/phalanx/test_reasons.py fails otherwise); to add one, add a line to the table of
its enum with ``_doc(group, meaning, fix, *on)``. The native planner's node exclusions (the counts
in its Schedulable=False messages) are explained in ``NODE_EXCLUSIONS`` the same way.

``on`` says where the reason appears: a condition with its status (``Failed=True``), ``Event``
(a Kubernetes Event, phase transitions included) or a sweep's ``status.trials[].reason``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from phalanx.constants import (
    ConditionType,
    KueueReason,
    NodeExclusion,
    Reason,
    SweepReason,
    UnschedulableReason,
    WorkloadReason,
)

PENDING = "Pending"  # the job waits (to be created, placed or admitted); the reason says why
FAILED = "Failed"  # the job ended Failed
OTHER = "Other"  # progress, success, suspension, restarts
GROUPS = (PENDING, FAILED, OTHER)
EVENT = "Event"
TRIAL = "status.trials[].reason"


@dataclass(frozen=True)
class ReasonDoc:
    group: str
    meaning: str
    fix: str  # what to do; "" when nothing is needed
    on: tuple[str, ...]  # "Type=Status", EVENT or TRIAL


def _doc(group: str, meaning: str, fix: str, *on: str) -> ReasonDoc:
    return ReasonDoc(group, meaning, fix, on)


def _on(cond: ConditionType, status: str) -> str:
    return f"{cond}={status}"


VALID_F, FAILED_T, SUCCEEDED_T = _on(ConditionType.VALID, "False"), _on(ConditionType.FAILED, "True"), _on(ConditionType.SUCCEEDED, "True")
CREATED_F, SCHED_F, SCHED_T, SCHED_U = (_on(ConditionType.CREATED, "False"), _on(ConditionType.SCHEDULABLE, "False"),
                                        _on(ConditionType.SCHEDULABLE, "True"), _on(ConditionType.SCHEDULABLE, "Unknown"))
RUNNING_F, RESTARTING_T, SUSPENDED_T = _on(ConditionType.RUNNING, "False"), _on(ConditionType.RESTARTING, "True"), _on(ConditionType.SUSPENDED, "True")
RECREATE = "no restart is counted; nothing to do unless it repeats"

REASONS: dict[Reason, ReasonDoc] = {
    Reason.INVALID_SPEC: _doc(FAILED, "the spec breaks a rule the operator checks before creating anything (layout, "
                              "network profile, topology levels, cluster policy, Pod Security level); the message names "
                              "the field and the rule", "fix that field (`phalanx validate JOB.yaml --config OPCONFIG` "
                              "gives the same verdict offline) and create the job again", VALID_F, FAILED_T, EVENT),
    Reason.VALIDATED: _doc(OTHER, "the spec passed the operator's checks", "", _on(ConditionType.VALID, "True")),
    Reason.RECONCILED: _doc(OTHER, "the operator's last pass decided the job without error", "",
                            _on(ConditionType.RECONCILED, "True")),
    Reason.PENDING: _doc(PENDING, "pods of the current gang are being created", "see `Created` and `Schedulable`", EVENT),
    Reason.CREATING: _doc(PENDING, "the operator starts creating the gang's pods (a new attempt)", "", EVENT),
    Reason.CREATED: _doc(OTHER, "every pod of the attempt was created", "", EVENT),
    Reason.CREATING_PODS: _doc(PENDING, "some of the gang's pods exist, the rest are being created", "if it stays, "
                               "look for `CreateRefused` (the message says what the API server refused)", CREATED_F),
    Reason.PODS_CREATED: _doc(OTHER, "every pod of the attempt exists", "", _on(ConditionType.CREATED, "True")),
    Reason.WAITING_FOR_OLD_PODS: _doc(PENDING, "pods of an earlier attempt are still terminating; the new gang is "
                                      "created once they are gone", "a pod stuck on a lost node is force-deleted after "
                                      "`forceDeleteAfterSeconds` (operator config); else check the kubelet", CREATED_F),
    Reason.SCHEDULING: _doc(PENDING, "every pod exists; the scheduler is binding them", "see `Schedulable`", EVENT),
    Reason.RUNNING: _doc(OTHER, "every pod of the gang runs", "", _on(ConditionType.RESTARTING, "False"), EVENT),
    Reason.ALL_NODES_RUNNING: _doc(OTHER, "every pod of the gang runs", "", _on(ConditionType.RUNNING, "True")),
    Reason.SUCCEEDED: _doc(OTHER, "every pod `successPolicy` names exited 0", "", SUCCEEDED_T, EVENT),
    Reason.SUSPENDED: _doc(OTHER, "`spec.suspend` is true: the pods were deleted, each saving a checkpoint on SIGTERM",
                           "set `spec.suspend: false` to resume (from the checkpoint, with a checkpoint volume)",
                           SUSPENDED_T, RUNNING_F, EVENT),
    Reason.RESUMED: _doc(OTHER, "`spec.suspend` is false again: a new gang is created and resumes from the checkpoint "
                         "(step 0 without a checkpoint volume)", "", _on(ConditionType.SUSPENDED, "False"), EVENT),
    Reason.DEADLINE_EXCEEDED: _doc(FAILED, "the job ran longer than `activeDeadlineSeconds`", "raise "
                                   "`activeDeadlineSeconds` (it may change at any time) and create the job again; with "
                                   "a checkpoint volume it resumes from its last checkpoint", FAILED_T, EVENT),
    Reason.GANG_INCOMPLETE: _doc(PENDING, "waiting for every pod of the gang to exist before it is placed", "see "
                                 "`Created`", SCHED_U),
    Reason.GANG_COMPLETE: _doc(OTHER, "every pod exists and the gates were lifted together (a backend whose scheduler "
                               "places the gang)", "", SCHED_T),
    Reason.PLACED: _doc(OTHER, "the native planner placed the whole gang (`status.placement` names the nodes)", "", SCHED_T),
    Reason.GATES_LIFTED: _doc(OTHER, "the gang's scheduling gates were lifted together; the scheduler binds the pods",
                              "", SCHED_T),
    Reason.GANG_TIMEOUT: _doc(FAILED, "the gang was not placed within `scheduling.gangTimeoutSeconds` and "
                              "`onGangTimeout` is `Fail`; the message carries the last `Schedulable` message",
                              "free or add capacity, ask for fewer or smaller nodes, relax `scheduling.topology.required`, "
                              "or use `onGangTimeout: Wait`", FAILED_T, EVENT),
    Reason.REPLANNING: _doc(PENDING, "released pods were not bound in time (their nodes changed); the gang is deleted "
                            "and planned again", RECREATE, SCHED_F, EVENT),
    Reason.CREATE_INTERRUPTED: _doc(PENDING, "a pinned creation stopped part-way (refused, an API error, an operator "
                                    "restart); the gang is deleted and created again behind its gate", RECREATE,
                                    SCHED_F, EVENT),
    Reason.RESIZING: _doc(PENDING, "an elastic job's gang is replaced by a smaller or larger one (`spec.elastic`); it "
                          "resumes from the checkpoint taken on SIGTERM (step 0 without a checkpoint volume)", "",
                          RUNNING_F, EVENT),
    Reason.RESTARTING: _doc(OTHER, "a retryable failure: the whole gang restarts after a backoff (`Restarting` "
                            "carries the failure)", "see the `Restarting` condition's reason and message", RUNNING_F, EVENT),
    Reason.PERMANENT_FAILURE: _doc(FAILED, "a pod failed in a way a restart cannot fix (an exit code 1-127 unless "
                                   "`failurePolicy` says otherwise); the message names the pod and code",
                                   "read the pod's log (`kubectl logs POD --previous`); fix the job; or list the code in "
                                   "`failurePolicy.retryableExitCodes`", FAILED_T, EVENT),
    Reason.MAX_RESTARTS_EXCEEDED: _doc(FAILED, "retryable failures used up `failurePolicy.maxRestarts`; the message "
                                       "names the last one", "fix what keeps failing (the message), or raise "
                                       "`failurePolicy.maxRestarts`", FAILED_T, EVENT),
    Reason.NODE_LOST: _doc(OTHER, "a pod's node is gone or NotReady: a retryable failure (the gang restarts elsewhere)",
                           "check the node; nothing to do for the job", RESTARTING_T),
    Reason.POD_LOST: _doc(OTHER, "a pod of the created gang disappeared: a retryable failure", "find who deleted it "
                          "(Events, audit log)", RESTARTING_T),
    Reason.HANG: _doc(OTHER, "no step progress for `failurePolicy.hangTimeoutSeconds`: a retryable failure; the "
                      "`Restarting` (or `Failed`) condition and Event carry rank 0's last log lines",
                      "look for a stuck collective in the pods' logs (NCCL_DEBUG=INFO), or raise `hangTimeoutSeconds`",
                      RESTARTING_T),
    Reason.EXITED: _doc(OTHER, "a pod's trainer exited with a code `failurePolicy` counts as retryable (128 and up: "
                        "killed by a signal, unless listed otherwise); the message has the code and the cause",
                        "see `status.lastFailure` and the pod's log (`kubectl logs POD --previous`)", RESTARTING_T),
    Reason.POD_FAILED: _doc(OTHER, "a pod failed without a reason or an exit code of its own: a retryable failure",
                            "see the pod's Events (`kubectl describe pod POD`)", RESTARTING_T),
    Reason.FORCE_DELETED: _doc(OTHER, "a pod stuck terminating on a lost node was deleted with grace period 0", "", EVENT),
    Reason.RESTARTED_IN_PLACE: _doc(OTHER, "the gang restarted in place: a pod's trainer exited with a code its "
                                    "restart rule maps to RestartAllContainers, so the kubelet restarted every "
                                    "container of the pod on the same node (no new pods, no scheduling); the "
                                    "other pods follow and the workers resume from the last checkpoint",
                                    "see `status.lastFailure` and `kubectl logs POD --previous`", RESTARTING_T, EVENT),
    Reason.RESTART_REQUESTED: _doc(OTHER, "the operator asked the gang's pods to restart in place (a hang, or the "
                                   "pods a peer's in-place restart left behind), through the pod annotation "
                                   "`phalanx.dev/restart-request`", "", RESTARTING_T, EVENT),
    Reason.NODE_REPLACED: _doc(OTHER, "one node of the running gang was lost (gone, NotReady) or quarantined: its pod "
                               "was created again, under the same name, on a free node of the gang's topology domain "
                               "and the other pods were asked to restart in place (`status.nodeReplacement`, "
                               "`status.lastRestartMode` ReplaceNode)", "check the old node; nothing to do for the job",
                               RESTARTING_T, EVENT),
    Reason.NODE_NOT_REPLACED: _doc(OTHER, "a lost or quarantined node of the running gang could not be replaced alone "
                                   "(the message says why: no free node in the domain, more than one node, no in-place "
                                   "restarts); a lost node restarts the whole gang, a quarantined one is left running",
                                   "free a node in the gang's domain, or let the gang restart", EVENT),
    Reason.CREATE_REFUSED: _doc(PENDING, "the API server refused a creation for now (quota, a PriorityClass or "
                                "ServiceAccount that does not exist yet, 409/429/5xx); retried with backoff",
                                "the message quotes the API server: raise the quota or create what is missing",
                                CREATED_F, EVENT),
    Reason.CREATE_REJECTED: _doc(FAILED, "the API server refused the gang for good (invalid, or forbidden by admission "
                                 "such as Pod Security); nothing was left behind", "fix what the message quotes and "
                                 "create the job again", CREATED_F, FAILED_T, EVENT),
    Reason.RECONCILE_ERROR: _doc(FAILED, "the operator could not decide the job (the message has the error); repeated "
                                 "errors end the job Failed", "report it with the operator's log: it is a bug",
                                 _on(ConditionType.RECONCILED, "False"), FAILED_T, EVENT),
    Reason.LOSS_NOT_FINITE: _doc(OTHER, "rank 0 reported a NaN or infinite loss: training diverged (the job keeps "
                                 "running)", "lower the learning rate, clip gradients (`training.gradClip`), check the data",
                                 _on(ConditionType.LOSS_NOT_FINITE, "True"), EVENT),
    Reason.LOSS_FINITE: _doc(OTHER, "the loss is finite again", "", _on(ConditionType.LOSS_NOT_FINITE, "False")),
    Reason.RESUMED_FROM_PREDECESSOR: _doc(OTHER, "the job resumed a checkpoint an earlier job of the same name wrote "
                                          "(`checkpoint.resume`)", "if unintended, use another checkpoint volume or "
                                          "`checkpoint.resume: false`",
                                          _on(ConditionType.RESUMED_FROM_PREDECESSOR, "True"), EVENT),
    Reason.RESUMED_FROM_CHECKPOINT: _doc(OTHER, "rank 0 reported that this attempt resumed from its checkpoint at the "
                                         "step the message names (`status.resumedStep`; a script reports it through "
                                         "`phalanx_common.report.latest_checkpoint()`); the Running message says so too",
                                         "", EVENT),
    Reason.NODE_QUARANTINED: _doc(OTHER, "a node was quarantined (a NodeQuarantine): no new gang is placed on it "
                                  "until it expires; on the Node, and on the job whose failure tipped it",
                                  "`kubectl get nq NODE -o yaml` says why; `kubectl delete nq NODE` clears it", EVENT),
    Reason.NODE_QUARANTINE_RELEASED: _doc(OTHER, "a node's quarantine expired (or was deleted): new gangs may use it "
                                          "again", "", EVENT),
}

UNSCHEDULABLE: dict[UnschedulableReason, ReasonDoc] = {
    UnschedulableReason.INSUFFICIENT: _doc(PENDING, "fewer nodes can take a pod than the gang needs; the message "
                                           "counts those that fit and why the others do not (not ready, cordoned, "
                                           "tainted, nodeSelector, resources)", "free or add capacity, or ask for "
                                           "fewer or smaller nodes; `phalanx plan` shows the same verdict offline", SCHED_F),
    UnschedulableReason.TOPOLOGY_REQUIRED: _doc(PENDING, "no domain of the `scheduling.topology.required` level holds "
                                                "the whole gang; the message gives the largest", "free capacity inside "
                                                "one domain, or use `preferred` instead of `required`", SCHED_F),
    UnschedulableReason.INVALID_REQUEST: _doc(PENDING, "the request cannot be planned: a `required` topology level the "
                                              "cluster's topology does not have (the preset detected from the nodes, or the "
                                              "configured one), or a request for no nodes", "name a level the message lists "
                                              "(`phalanx plan` prints the detected topology)", SCHED_F),
    UnschedulableReason.QUEUED: _doc(PENDING, "strict queue order only (the planner without backfill; the operator "
                                     "plans with backfill and does not set it): a gang ahead in the queue (priority, "
                                     "then age) cannot be placed, so none is placed past it", "wait, or give the job "
                                     "a higher `priorityClassName`", SCHED_F),
}



@dataclass(frozen=True)
class ExclusionDoc:
    meaning: str
    fix: str


NODE_EXCLUSIONS: dict[NodeExclusion, ExclusionDoc] = {
    NodeExclusion.NOT_READY: ExclusionDoc("the node's Ready condition is not True", "check the node and its kubelet"),
    NodeExclusion.QUARANTINED: ExclusionDoc("a NodeQuarantine names the node (an unhealthy condition or taint, or "
                                            "jobs' failures named it repeatedly); gangs running there keep it",
                                            "`kubectl get nq NODE -o yaml` says why; fix the node, then `kubectl delete nq NODE`"),
    NodeExclusion.CORDONED: ExclusionDoc("the node is cordoned (`spec.unschedulable`) and the job does not tolerate "
                                         "`node.kubernetes.io/unschedulable`", "uncordon the node"),
    NodeExclusion.TAINTED: ExclusionDoc("the node has a `NoSchedule` or `NoExecute` taint the job does not tolerate",
                                        "add a toleration to the job (`tolerations`), if policy allows"),
    NodeExclusion.SELECTOR_MISMATCH: ExclusionDoc("the node's labels do not match the job's `nodeSelector`",
                                                  "label the node, or change `nodeSelector`"),
    NodeExclusion.TOO_LITTLE: ExclusionDoc("less of the resource is free on the node than one pod requests, after "
                                           "its running pods and other gangs' reservations", "free capacity, or "
                                           "request less per pod"),
    NodeExclusion.OUTSIDE_WORKERS_DOMAIN: ExclusionDoc("a role's pod: the node is outside the domain of the "
                                                       "`scheduling.topology.required` level the workers were placed in",
                                                       "free capacity for the roles inside one domain, or relax "
                                                       "`required`"),
}

KUEUE_REASONS: dict[KueueReason, ReasonDoc] = {
    KueueReason.ADMITTED: _doc(OTHER, "Kueue admitted the gang (kueue backend)", "", SCHED_T),
    KueueReason.QUOTA_RESERVED: _doc(PENDING, "Kueue reserved quota; its admission checks are pending", "see the "
                                     "Workload's admission checks", SCHED_U),
    KueueReason.PENDING: _doc(PENDING, "Kueue has not admitted the Workload (Kueue's own reason, e.g. `Inadmissible`, "
                              "replaces this one when it gives one)", "the message quotes Kueue: check the LocalQueue, "
                              "ClusterQueue and quota", SCHED_F),
    KueueReason.QUEUED: _doc(PENDING, "Kueue's Workload for the gang exists but Kueue has not evaluated it yet", "", SCHED_U),
    KueueReason.WAITING: _doc(PENDING, "the pods wait behind Kueue's admission gate; Kueue has made no Workload yet",
                              "check that Kueue runs and manages the namespace (its pod integration)", SCHED_U),
    KueueReason.DEACTIVATED: _doc(PENDING, "Kueue's Workload is deactivated (`spec.active: false`)", "reactivate the "
                                  "Workload", SCHED_F, SUSPENDED_T),
    KueueReason.EVICTED: _doc(PENDING, "Kueue evicted the gang (Kueue's reason, e.g. `Preempted`, replaces this one "
                              "when it gives one); a new gang queues and resumes (from the checkpoint with a checkpoint "
                              "volume), no restart counted", "", SCHED_F, SUSPENDED_T, EVENT),
    KueueReason.STOPPED: _doc(PENDING, "Kueue stopped the gang's pods (their `TerminationTarget` reason replaces this "
                              "one when they give one); a new gang queues", "", SCHED_F, SUSPENDED_T, EVENT),
}

WORKLOAD_REASONS: dict[WorkloadReason, ReasonDoc] = {
    WorkloadReason.SCHEDULED: _doc(OTHER, "kube-scheduler placed the whole PodGroup (workload backend)", "", SCHED_T),
    WorkloadReason.UNSCHEDULABLE: _doc(PENDING, "kube-scheduler cannot place the PodGroup (its own reason replaces "
                                       "this one when it gives one); the message quotes it", "free or add capacity, "
                                       "or relax `scheduling.topology.required`", SCHED_F),
    WorkloadReason.WAITING_FOR_SCHEDULER: _doc(PENDING, "kube-scheduler has not tried the PodGroup yet (fewer pods "
                                               "than its minCount seen)", "", SCHED_U),
    WorkloadReason.POD_GROUP_MISSING: _doc(PENDING, "the job's PodGroup does not exist (yet)", "if it stays, check that "
                                           "the API server serves scheduling.k8s.io/v1alpha2", SCHED_U),
    WorkloadReason.DISRUPTED: _doc(PENDING, "kube-scheduler is disrupting the PodGroup (its own reason, e.g. "
                                   "`PreemptionByScheduler`, replaces this one when it gives one)", "", SCHED_F),
}

SWEEP_REASONS: dict[SweepReason, ReasonDoc] = {
    SweepReason.INVALID_SPEC: _doc(FAILED, "the sweep or one of its generated trials breaks a rule; the message names "
                                   "the parameter and value", "fix it (`phalanx validate SWEEP.yaml`) and create the "
                                   "sweep again", VALID_F, FAILED_T, RUNNING_F, EVENT),
    SweepReason.VALIDATED: _doc(OTHER, "every trial was generated and checked", "", _on(ConditionType.VALID, "True")),
    SweepReason.TRIAL_CREATED: _doc(OTHER, "a trial's TrainingJob was created", "", EVENT),
    SweepReason.TRIAL_SUCCEEDED: _doc(OTHER, "a trial succeeded; its objective value is recorded", "", EVENT),
    SweepReason.TRIAL_FAILED: _doc(OTHER, "a trial's TrainingJob failed (the sweep goes on)", "see the trial's "
                                   "TrainingJob (`kubectl describe tj NAME`)", TRIAL, EVENT),
    SweepReason.EARLY_STOPPED: _doc(OTHER, "the early-stopping rule suspended a lagging trial (its checkpoint stays)",
                                    "", TRIAL, EVENT),
    SweepReason.TRIAL_DIVERGED: _doc(OTHER, "a trial reported a NaN or infinite loss: suspended", "", TRIAL, EVENT),
    SweepReason.TRIAL_NAME_TAKEN: _doc(OTHER, "a TrainingJob of the trial's name exists and is not the sweep's",
                                       "delete or rename that TrainingJob", TRIAL, EVENT),
    SweepReason.CREATE_REJECTED: _doc(OTHER, "the API server refused a trial for good", "fix what the message quotes",
                                      TRIAL),
    SweepReason.NEW_BEST: _doc(OTHER, "a trial became the best so far", "", EVENT),
    SweepReason.TRIALS_RUNNING: _doc(OTHER, "trials are running or waiting for their turn (`maxParallel`)", "",
                                     ConditionType.RUNNING),
    SweepReason.WAITING_FOR_CAPACITY: _doc(PENDING, "a trial's gang is not placed: no more trials are created until "
                                           "it is", "see that trial's `Schedulable` condition", ConditionType.RUNNING),
    SweepReason.SWEEP_COMPLETE: _doc(OTHER, "every trial finished and at least one succeeded", "", SUCCEEDED_T, EVENT),
    SweepReason.NO_TRIAL_SUCCEEDED: _doc(FAILED, "every trial finished and none succeeded", "see the trials' "
                                         "reasons in `status.trials`", FAILED_T, EVENT),
}

# Each reason enum and its table (docstables renders them; the unit test walks them).
TABLES: tuple[tuple[type[StrEnum], dict, str], ...] = (
    (Reason, REASONS, "operator"),
    (UnschedulableReason, UNSCHEDULABLE, "native planner"),
    (KueueReason, KUEUE_REASONS, "kueue backend"),
    (WorkloadReason, WORKLOAD_REASONS, "workload backend"),
)
SWEEP_TABLES: tuple[tuple[type[StrEnum], dict, str], ...] = ((SweepReason, SWEEP_REASONS, "sweep"),)


@dataclass(frozen=True)
class ConditionDoc:
    true: str
    false: str
    unknown: str = ""


CONDITIONS: dict[ConditionType, ConditionDoc] = {
    ConditionType.VALID: ConditionDoc("the spec passed the operator's checks", "it did not (`InvalidSpec`): the job is Failed"),
    ConditionType.CREATED: ConditionDoc("every pod of the current attempt was created",
                                 "pods are being created, old ones still terminate, or the API server refused one"),
    ConditionType.SCHEDULABLE: ConditionDoc("the gang is placed or admitted as a whole",
                                     "it cannot be placed now; the reason says why, the message what is missing",
                                     "waiting for every pod, or for the backend's verdict"),
    ConditionType.RUNNING: ConditionDoc("every pod of the gang runs", "not (yet, or any more): creating, restarting, "
                                 "suspended, resizing or finished"),
    ConditionType.RESTARTING: ConditionDoc("a whole-gang restart after a retryable failure; the reason is the failure's "
                                    "(`NodeLost`, `PodLost`, `Hang`, `exited`, or the pod's own)",
                                    "the gang runs again, or the job finished"),
    ConditionType.SUSPENDED: ConditionDoc("the pods are gone (their checkpoint kept, with a checkpoint volume): `spec.suspend`, or the admitter "
                                   "(Kueue) took the gang away", "resumed, or readmitted"),
    ConditionType.SUCCEEDED: ConditionDoc("the job succeeded (`successPolicy`)", "it failed"),
    ConditionType.FAILED: ConditionDoc("the job failed; the reason says why", "it succeeded"),
    ConditionType.RECONCILED: ConditionDoc("the operator's last pass decided the job", "it could not (`ReconcileError`)"),
    ConditionType.LOSS_NOT_FINITE: ConditionDoc("rank 0 reported a NaN or infinite loss", "the loss is finite again"),
    ConditionType.RESUMED_FROM_PREDECESSOR: ConditionDoc("the job resumed a checkpoint an earlier job of its name wrote",
                                                  "(never set)"),
}

SWEEP_CONDITIONS: dict[ConditionType, ConditionDoc] = {
    ConditionType.VALID: ConditionDoc("the sweep and every generated trial passed the checks", "they did not: the sweep is Failed"),
    ConditionType.RUNNING: ConditionDoc("some trial has started", "none yet, or the sweep finished"),
    ConditionType.SUCCEEDED: ConditionDoc("every trial finished and one succeeded", "every trial finished and none succeeded"),
    ConditionType.FAILED: ConditionDoc("the sweep is invalid, or no trial succeeded", "it succeeded"),
}


def condition_types() -> list[str]:
    """Every condition type (constants.ConditionType), in its order."""
    return [str(member) for member in ConditionType]
