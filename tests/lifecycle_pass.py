"""One reconcile pass set up for calling a single lifecycle step, for the table-driven policy
tests (tests/unit/phalanx/lifecycle/test_*.py): the job as ``decide`` accepts it, its status, its pods."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from phalanx.api.config import OperatorConfig
from phalanx.api.slots import slot_pod_name, worker
from phalanx.constants import GANG_SCHEDULING_GATE, LABEL_NODE_RANK, LABEL_RESTART_ATTEMPT
from phalanx.decision import Observed
from phalanx.lifecycle.attempts import split_attempts
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.reconcile import release_all
from phalanx.lifecycle.status import StatusView, iso
from phalanx.lifecycle.validity import accept, refuse_invalid
from phalanx.validate import validate_job
from tests.conftest import MINIMAL

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def ago(seconds: float) -> str:
    """NOW less ``seconds``, as the status writes times."""
    return iso(NOW - timedelta(seconds=seconds))


def condition(type_: str, status: str, reason: str = "Test", since: float = 0.0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": ago(since)}


def pod(rank: int, attempt: int = 0, phase: str | None = None, *, job: str = "job", gated: bool = False,
        node: str | None = None, deleting: bool = False, created: float | None = None,
        reason: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    """A worker pod of ``job`` as the index shows it (``created``: seconds before NOW)."""
    meta: dict[str, Any] = {"name": slot_pod_name(job, worker(rank), attempt),
                            "labels": {LABEL_NODE_RANK: str(rank), LABEL_RESTART_ATTEMPT: str(attempt)}}
    if deleting:
        meta["deletionTimestamp"] = ago(1)
    if created is not None:
        meta["creationTimestamp"] = ago(created)
    spec: dict[str, Any] = {"schedulingGates": [{"name": GANG_SCHEDULING_GATE}] if gated else []}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if reason:
        status["reason"] = reason
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": {"exitCode": exit_code}}}]
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def gang(count: int = 2, attempt: int = 0, phase: str | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    return [pod(rank, attempt, phase, **kwargs) for rank in range(count)]


def job(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The minimal valid job (2 nodes) with ``spec`` merged into its spec and the given status."""
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(spec or {})
    if status is not None:
        obj["status"] = status
    return obj


def prepared(obj: dict[str, Any], pods: list[dict[str, Any]] = (), now: datetime = NOW,
             config: OperatorConfig | None = None, **observed: Any) -> Pass:
    """The pass as ``decide`` hands it to the policy steps: validated, accepted, pods split by attempt."""
    config = config or OperatorConfig()
    seen = Observed(pods=list(pods), **observed)
    view = StatusView(obj.get("status"), obj["metadata"].get("generation"), now)
    job_, problems = validate_job(obj, config, seen.namespace_labels)
    ctx = Pass(obj=obj, observed=seen, now=now, config=config, gang=release_all, fits=None, view=view, job=job_,
               problems=problems)
    assert refuse_invalid(ctx) is None, problems
    accept(ctx)
    split_attempts(ctx)
    return ctx


def conditions(ctx: Pass) -> dict[str, tuple[str, str]]:
    """{type: (status, reason)} of the pass's status."""
    return {c.type: (c.status, c.reason) for c in ctx.view.status.conditions}
