"""successPolicy: the job succeeds once every pod of the roles that decide success exited 0 (every
pod, unless successPolicy or a TensorFlow chief says otherwise); the rest are stopped by
``ttl.finished`` on the next pass (pure)."""

from __future__ import annotations

from phalanx.api.types import Phase
from phalanx.constants import Reason
from phalanx.decision import Plan
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.status import count_ready, succeeded_roles


def succeeded(ctx: Pass) -> Plan | None:
    message = succeeded_roles(ctx.spec, ctx.current)
    if message is None:
        return None
    ctx.view.finish(Phase.SUCCEEDED, Reason.SUCCEEDED, message)
    count_ready(ctx.view, [])
    return ctx.done()
