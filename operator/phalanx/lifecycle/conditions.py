"""Kubernetes-style conditions (type, status, reason, message, lastTransitionTime, observedGeneration)."""

from __future__ import annotations

from phalanx.api.types import Condition


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: str,
    generation: int | None,
) -> list[Condition]:
    """Return a new list with the condition set; lastTransitionTime moves only when status flips."""
    value = status if isinstance(status, str) else ("True" if status else "False")
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type != type_:
            out.append(cond)
            continue
        found = True
        moved = cond.status != value
        out.append(
            Condition(
                type=type_,
                status=value,
                reason=reason,
                message=message,
                last_transition_time=now if moved else (cond.last_transition_time or now),
                observed_generation=generation,
            )
        )
    if not found:
        out.append(Condition(type=type_, status=value, reason=reason, message=message,
                             last_transition_time=now, observed_generation=generation))
    return out


def get_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((cond for cond in conditions if cond.type == type_), None)


def is_true(conditions: list[Condition], type_: str) -> bool:
    cond = get_condition(conditions, type_)
    return cond is not None and cond.status == "True"


def reason_of(conditions: list[Condition], type_: str) -> str | None:
    """The reason of the condition of ``type_`` (None when it is not set)."""
    cond = get_condition(conditions, type_)
    return cond.reason if cond is not None else None
