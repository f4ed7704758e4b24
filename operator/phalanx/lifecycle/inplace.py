"""Restart in place (pure): a gang whose pods carry the trainer's restart rule (render/pod.py
restart_in_place; Kubernetes RestartAllContainers) restarts on the same pods and nodes.

The kubelet restarts a pod's containers when its trainer exits with an in-place code; the operator
sees it as the trainer's restartCount rising while the pod is not Failed. It counts one gang
restart per new highest count (status.restarts, bounded by maxRestarts like every restart; the
count it has seen is status.inPlaceRestarts), records the failure from the container's last
termination, and asks the pods that have not restarted yet to do so: the annotation
ANNOTATION_RESTART_REQUEST set to the count they should reach, which the runtime reads through a
downward-API file. A hang restarts in place the same way: every pod is asked.

An in-place restart is not a new attempt: the pods, their names, labels and the restart-attempt
label stay (lifecycle/attempts.py); only a Failed or lost pod still recreates the gang."""

from __future__ import annotations

import copy
from typing import Any

from phalanx.api.types import Phase
from phalanx.constants import (
    ANNOTATION_RESTART_REQUEST,
    CONTAINER_NAME,
    ENV_RESTART_BASE,
    EXIT_RESTART_IN_PLACE,
    FEATURE_RESTART_ALL_CONTAINERS,
    RESTART_RULE_ACTION,
    ConditionType,
    FailureCategory,
    Reason,
    RestartMode,
)
from phalanx.decision import Plan
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.failure_cause import Cause, cause_of, precedence
from phalanx.lifecycle.failures import Failure, node_of, pod_rank
from phalanx.lifecycle.pods import alive_names, is_alive, pod_phase
from phalanx.render.pod import CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT
from phalanx_common.restarts import restart_count

# The Restarting reasons of a gang whose pods stay (a replaced node's pod aside) and restart in place.
IN_PLACE_REASONS = (Reason.RESTARTED_IN_PLACE, Reason.RESTART_REQUESTED, Reason.NODE_REPLACED)

# The reason the kubelet gives a container it removed to restart every container of the pod.
KUBELET_REMOVED = "RestartingAllContainers"


def _trainer_status(pod: dict[str, Any]) -> dict[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER_NAME:
            return status
    return {}


def trainer_restarts(pod: dict[str, Any]) -> int:
    """How many times the pod's trainer container restarted: the kubelet's count, plus the gang's
    in-place restarts before the pod was created when it replaced a pod on a lost node
    (restart_base)."""
    count = _trainer_status(pod).get("restartCount")
    return restart_base(pod) + (count if type(count) is int and count > 0 else 0)


def restart_base(pod: dict[str, Any]) -> int:
    """The gang's in-place restarts a replacement pod was created at (lifecycle/replace_node.py:
    the trainer's ENV_RESTART_BASE); 0 for every other pod."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == CONTAINER_NAME:
            for env in container.get("env") or []:
                if env.get("name") == ENV_RESTART_BASE:
                    return restart_count(env.get("value"))
    return 0


def requested(pod: dict[str, Any]) -> int:
    """The restart count the operator last asked the pod to reach (0: never asked)."""
    return restart_count(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RESTART_REQUEST))


def restarts_in_place(pod: dict[str, Any]) -> bool:
    """Whether the pod's trainer carries the restart rule (the pod was created with it)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == CONTAINER_NAME:
            return bool(container.get("restartPolicyRules"))
    return False


def _restarted(pods: list[dict[str, Any]], counted: int) -> list[dict[str, Any]]:
    """The pods (not Failed) whose trainer restarted past ``counted``."""
    return [p for p in pods if pod_phase(p) != "Failed" and trainer_restarts(p) > counted]


def in_place_failure(pod: dict[str, Any]) -> Failure:
    """The failure behind a pod's in-place restart: its trainer's last termination, unless that
    is the kubelet's own record of a container it removed to restart the pod (no exit code of the
    program's: unknown)."""
    last = (_trainer_status(pod).get("lastState") or {}).get("terminated") or {}
    if last.get("reason") == KUBELET_REMOVED:
        return Failure(pod["metadata"]["name"], pod_rank(pod), Reason.EXITED, "restarted in place", None, True,
                       Cause(FailureCategory.UNKNOWN, "the kubelet kept no exit code of the restarted container"))
    code = last.get("exitCode") if type(last.get("exitCode")) is int else None
    cause = cause_of({"spec": pod.get("spec"), "status": {"containerStatuses": [
        {"name": CONTAINER_NAME, "lastState": {"terminated": last}}]}})
    return Failure(pod["metadata"]["name"], pod_rank(pod), Reason.EXITED, "restarted in place", code, True, cause)


def first_restarted(pods: list[dict[str, Any]], counted: int) -> dict[str, Any] | None:
    """The pod that names the restart: of those that restarted past ``counted``, one whose cause
    explains the others' (failure_cause.precedence: a killed process before a peer gone), then by
    rank."""
    restarted = _restarted(pods, counted)
    if not restarted:
        return None
    return min(restarted, key=lambda p: (precedence(in_place_failure(p).cause), pod_rank(p) < 0, pod_rank(p)))


def laggards(pods: list[dict[str, Any]], target: int) -> list[str]:
    """The pods still to be asked to reach restart count ``target``: alive, with the rule, neither
    restarted that far nor asked already."""
    return sorted(p["metadata"]["name"] for p in pods if is_alive(p) and pod_phase(p) != "Failed"
                  and restarts_in_place(p) and trainer_restarts(p) < target and requested(p) < target)


def ask(ctx: Pass, target: int) -> None:
    """Ask the pods that lag behind to restart until their trainer's count is ``target``."""
    for name in laggards(ctx.current, target):
        ctx.plan.annotate_pods[name] = {ANNOTATION_RESTART_REQUEST: str(target)}


def restarted_in_place(ctx: Pass) -> Plan | None:
    """A pod's trainer restarted in place: count the gang restart (or fail the job past
    maxRestarts) and ask the other pods to follow; once every pod caught up, the gang runs."""
    view, counted = ctx.view, ctx.view.status.in_place_restarts
    if _broken(ctx):
        # a pod that failed, is on a lost node or is gone: replace_node or restart.failed count this
        # incident once (its peers' in-place restarts are its echo, not a restart of their own)
        return None
    highest = max((trainer_restarts(p) for p in ctx.current if pod_phase(p) != "Failed"), default=0)
    if highest <= counted:
        ask(ctx, counted)  # a request lost (the operator restarted between the count and the patch)
        _caught_up(ctx)
        return None
    pod = first_restarted(ctx.current, counted)
    assert pod is not None
    failure = in_place_failure(pod)
    view.status.last_failure = failure.record(view.now, node_of(ctx.current, failure.pod))
    policy, new = ctx.spec.failure_policy, highest - counted
    if view.status.restarts + new > policy.max_restarts:
        view.finish(Phase.FAILED, Reason.MAX_RESTARTS_EXCEEDED, f"restarted {view.status.restarts} times "
                    f"(maxRestarts {policy.max_restarts}); last failure: {failure.describe()}")
        ctx.plan.delete_pods += alive_names(ctx.current)
        return ctx.done()
    message = f"restart {view.status.restarts + new}/{policy.max_restarts} in place after {failure.describe()}"
    _count(ctx, new, highest, Reason.RESTARTED_IN_PLACE, message)
    return None


def _broken(ctx: Pass) -> bool:
    """A pod of the gang failed, sits on a lost node, or is missing from a created gang."""
    lost = ctx.observed.lost_nodes
    if any(pod_phase(p) == "Failed" or (p.get("spec") or {}).get("nodeName") in lost for p in ctx.current):
        return True
    return bool(ctx.view.status.attempt_created) and len(ctx.current) < ctx.spec.gang_size


def request_restart(ctx: Pass, failure: Failure) -> Plan:
    """A hang (or another failure that leaves every pod in place): every pod is asked to restart
    in place; the caller checked maxRestarts."""
    view = ctx.view
    target = max(view.status.in_place_restarts, *(trainer_restarts(p) for p in ctx.current)) + 1
    message = f"restart {view.status.restarts + 1}/{ctx.spec.failure_policy.max_restarts} in place after {failure.describe()}"
    _count(ctx, 1, target, Reason.RESTART_REQUESTED, message)
    return ctx.done()


def _count(ctx: Pass, new: int, target: int, reason: Reason, message: str) -> None:
    """``new`` gang restarts in place, the pods asked to reach ``target``."""
    view = ctx.view
    view.status.restarts += new
    view.status.in_place_restarts = target
    view.status.last_restart_mode = RestartMode.IN_PLACE
    view.status.resumed_step = None  # the restarted script says where it resumed
    view.status.last_progress_time = view.now  # the hang clock starts afresh with each restart
    view.cond(ConditionType.RESTARTING, True, reason, message)
    view.events.append(("Warning", reason, message))
    ask(ctx, target)


def in_place_possible(ctx: Pass) -> bool:
    """Whether the current gang can restart in place: every pod alive, not Failed, with the rule,
    and no restart in place under way (one that has not caught up within hangTimeoutSeconds — a
    request the pods did not take — recreates the gang instead of asking again)."""
    pods = ctx.current
    return bool(pods) and len(pods) == ctx.spec.gang_size and not under_way(ctx) and all(
        is_alive(p) and pod_phase(p) != "Failed" and restarts_in_place(p) for p in pods)


def under_way(ctx: Pass) -> bool:
    """Whether a restart in place is under way: its Restarting condition has not ended."""
    cond = next((c for c in ctx.view.status.conditions if c.type == ConditionType.RESTARTING), None)
    return cond is not None and cond.status == "True" and cond.reason in IN_PLACE_REASONS


def _caught_up(ctx: Pass) -> None:
    """The Restarting condition an in-place restart set ends once every pod's trainer reached the
    counted restarts and runs again; the hang clock starts afresh then, as for a new gang (the
    pods may take a while to see a request: the kubelet refreshes the downward-API file)."""
    view = ctx.view
    if not under_way(ctx):
        return
    target = view.status.in_place_restarts
    if all(trainer_restarts(p) >= target and (_trainer_status(p).get("state") or {}).get("running") is not None
           for p in ctx.current):
        view.cond(ConditionType.RESTARTING, False, Reason.RUNNING, "")
        view.status.last_progress_time = view.now


# --- Discovery (startup.py): can this cluster restart a pod's containers in place? -------------

# A generated name: a pod someone created under a fixed name would make every probe fail (409).
PROBE_POD_PREFIX = "phalanx-restart-rules-probe-"


def probe_pod(namespace: str) -> dict[str, Any]:
    """A pod whose container carries a RestartAllContainers rule, for a server-side dry-run
    create: an API server without the feature drops the rules (or refuses the action)."""
    container = {"name": CONTAINER_NAME, "image": "phalanx-probe", "restartPolicy": "Never",
                 "restartPolicyRules": [{"action": RESTART_RULE_ACTION,
                                         "exitCodes": {"operator": "In", "values": [EXIT_RESTART_IN_PLACE]}}],
                 "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT)}
    # as restricted as the gang's own pods: a namespace enforcing Pod Security admits it
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": PROBE_POD_PREFIX, "namespace": namespace},
            "spec": {"restartPolicy": "Never", "containers": [container], "automountServiceAccountToken": False,
                     "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT)}}


def rules_kept(pod: dict[str, Any]) -> bool:
    """Whether the API server's answer to the probe still carries its RestartAllContainers rule."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if any(rule.get("action") == RESTART_RULE_ACTION for rule in container.get("restartPolicyRules") or []):
            return True
    return False


def in_place_verdict(kept: bool | None, lacking: list[str]) -> tuple[bool, str]:
    """Discovery's answer and why: ``kept`` — whether the probe's rule survived a dry-run create
    (None: the probe was refused for another reason); ``lacking`` — nodes without the feature."""
    if kept is False:
        return False, "off (the API server drops or refuses RestartAllContainers rules)"
    if lacking:
        more = f" and {len(lacking) - 10} more" if len(lacking) > 10 else ""
        return False, f"off (nodes without {FEATURE_RESTART_ALL_CONTAINERS}: {', '.join(lacking[:10])}{more})"
    if kept is None:
        return True, ("on (the probe pod was refused, every node declares the feature; pods whose rules the API "
                      "server drops restart by recreation)")
    return True, "on"


def nodes_lacking(nodes: list[dict[str, Any]]) -> list[str]:
    """The nodes whose kubelet does not declare the in-place restart feature
    (node.status.declaredFeatures, Kubernetes 1.36 and later)."""
    return sorted(n["metadata"]["name"] for n in nodes
                  if FEATURE_RESTART_ALL_CONTAINERS not in ((n.get("status") or {}).get("declaredFeatures") or []))
