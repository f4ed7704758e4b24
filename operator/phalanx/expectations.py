"""Controller expectations of a job's pass: what the pod index must show before the next pass
decides (its creates, deletes and releases), as a pure predicate, and the wait for it."""

from __future__ import annotations

from typing import Any

from phalanx.controlloop import await_until
from phalanx.decision import Plan
from phalanx.lifecycle.pods import is_gated


def expectations_met(pods: list[dict[str, Any]], plan: Plan) -> bool:
    """The index's ``pods`` show ``plan``'s creates, its deletes (gone or terminating) and its
    releases (no longer gated)."""
    created = {o["metadata"]["name"] for o in plan.create if o["kind"] == "Pod"}
    deleted, released = set(plan.delete_pods), set(plan.release)
    names = {p["metadata"]["name"] for p in pods}
    going = {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")}
    still_gated = {p["metadata"]["name"] for p in pods if p["metadata"]["name"] in released and is_gated(p)}
    return created <= names and not ((deleted & names) - going) and not still_gated


def expects_anything(plan: Plan) -> bool:
    return any(o["kind"] == "Pod" for o in plan.create) or bool(plan.delete_pods or plan.release)


async def await_expectations(key: tuple[str, str], index: Any, plan: Plan) -> None:
    """Controller expectations: wait until the index has seen our creates, deletes and releases
    (a pass on a view that still shows released pods gated would release them again)."""
    if expects_anything(plan):
        await await_until(lambda: expectations_met(list(index.get(key, [])), plan))
