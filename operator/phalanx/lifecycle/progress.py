"""Rank 0's progress, parsed strictly and applied to the status. Pure.

The progress endpoint's body and rank 0's termination message come from the training pod, i.e.
from user code (a custom image or command can serve anything on the progress port). Everything
the operator takes from them goes through :func:`parse_progress`: at most ``MAX_BYTES`` and
``MAX_DEPTH`` levels, known keys only, integers in range, finite numbers, bounded strings.
The one exception is ``loss``: a NaN or infinite loss is a real outcome (a diverged run), so it
is kept as a float here and the reconcile reports it (condition ``LossNotFinite``) instead of
writing it into the status, where it would make the patch invalid JSON.
A termination message may instead be a failing process's error report (``{"phase": "Failed",
"error": {...}}``, no step): lifecycle/failure_cause.py reads that one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from phalanx.api.types import CheckpointStatus, Phase
from phalanx.constants import (
    CONTAINER_NAME,
    LABEL_NODE_RANK,
    MAX_REPORTED_METRICS,
    METRIC_NAME_PATTERN,
    PHASES_WITHOUT_STEPS,
    PORT_NAME_PROGRESS,
    PROGRESS_PORT,
    ConditionType,
    ProgressKey,
    Reason,
    StartupPhase,
)
from phalanx.lifecycle.conditions import get_condition, is_true
from phalanx.lifecycle.pods import attempt_of
from phalanx.lifecycle.status import StatusView

MAX_BYTES = 64 * 1024  # body / message; larger is refused unread
MAX_DEPTH = 4  # the runtime's deepest value is {"lastCheckpoint": {...}}: depth 2
MAX_STRING = 1024
MAX_COUNT = 2**53  # steps, world size: exact in a float and in int64
MAX_RATE = 1e15  # tokens/s, seconds, MFU, epoch seconds: finite and far from overflow
MAX_ETA_SECONDS = 2**31 - 1  # estimatedRemainingSeconds from a huge stepTimeSeconds stays an int32
MAX_STARTUP_SECONDS = 7 * 24 * 3600.0  # a start-up phase ending later than this is no start-up
MAX_NAMED_IN_PROBLEM = 5  # dropped metric names a problem lists (then "and N more")
_BAD = object()
_TOKENS = re.compile(r'[\\"\[\]{}]')
_METRIC_NAME = re.compile(METRIC_NAME_PATTERN)


def _count(value: Any) -> Any:
    return value if type(value) is int and 0 <= value <= MAX_COUNT else _BAD  # type(): bool is not a count


def _rate(value: Any) -> Any:
    # The comparison rejects NaN and ±inf, and never converts a huge int (OverflowError).
    return float(value) if type(value) in (int, float) and 0 <= value <= MAX_RATE else _BAD


def _loss(value: Any) -> Any:
    """Any float, NaN and ±infinity included (reported as such); never a string or a bool."""
    if type(value) is float:
        return value
    return float(value) if type(value) is int and abs(value) <= MAX_COUNT else _BAD


def _string(limit: int) -> Callable[[Any], Any]:
    return lambda value: value if isinstance(value, str) and len(value) <= limit else _BAD


def _record(fields: dict[str, Callable[[Any], Any]], required: tuple[str, ...]) -> Callable[[Any], Any]:
    """A nested object: only ``fields``, each valid; ``required`` present."""

    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            return _BAD
        out = {key: checked(value[key]) for key, checked in fields.items() if value.get(key) is not None}
        if any(item is _BAD for item in out.values()) or any(key not in out for key in required):
            return _BAD
        return out

    return check


def _metric_value(value: Any) -> float | None:
    """A reported metric's value: a finite number within ±MAX_RATE (a bool is not one)."""
    if type(value) not in (int, float) or not -MAX_RATE <= value <= MAX_RATE:  # NaN and ±inf fail too
        return None
    return float(value)


def _metrics(value: Any) -> Any:
    """``{name: number}``: the valid entries, at most MAX_REPORTED_METRICS of them in the order
    sent; the invalid ones (name, value or past the bound) are left out and named by
    :func:`dropped_metrics`. Not a mapping at all: invalid."""
    if not isinstance(value, dict):
        return _BAD
    out: dict[str, float] = {}
    for name, raw in value.items():
        number = _metric_value(raw)
        if number is not None and isinstance(name, str) and _METRIC_NAME.fullmatch(name) and len(out) < MAX_REPORTED_METRICS:
            out[name] = number
    return out


def dropped_metrics(sent: dict[Any, Any], kept: dict[str, float]) -> str | None:
    """A problem naming the entries of ``sent`` that :func:`_metrics` left out (bounded), or None."""
    dropped = [name for name in sent if name not in kept]
    if not dropped:
        return None
    named = ", ".join(repr(str(name)[:40]) for name in dropped[:MAX_NAMED_IN_PROBLEM])
    more = f" and {len(dropped) - MAX_NAMED_IN_PROBLEM} more" if len(dropped) > MAX_NAMED_IN_PROBLEM else ""
    return (f"{ProgressKey.METRICS}: dropped {named}{more} (a name matching {METRIC_NAME_PATTERN}, a finite number, "
            f"at most {MAX_REPORTED_METRICS} entries)")


def _startup(value: Any) -> Any:
    """``{StartupPhase: seconds}``: the known phases with a number in [0, MAX_STARTUP_SECONDS],
    rounded to 0.01 s, in the phases' order; anything else in it is left out. Not a mapping: invalid."""
    if not isinstance(value, dict):
        return _BAD
    out: dict[str, float] = {}
    for phase in StartupPhase:
        seconds = value.get(phase.value)
        if type(seconds) in (int, float) and 0 <= seconds <= MAX_STARTUP_SECONDS:  # NaN and ±inf fail too
            out[phase.value] = round(float(seconds), 2)
    return out


FIELDS: dict[str, Callable[[Any], Any]] = {
    ProgressKey.PHASE: _string(32),
    ProgressKey.STEP: _count,
    ProgressKey.TOTAL_STEPS: _count,
    ProgressKey.WORLD_SIZE: _count,
    ProgressKey.LOSS: _loss,
    ProgressKey.TOKENS_PER_SECOND: _rate,
    ProgressKey.MFU: _rate,
    ProgressKey.STEP_TIME_SECONDS: _rate,
    ProgressKey.START_TIME: _rate,
    ProgressKey.UPDATED_AT: _rate,
    ProgressKey.EPOCH: _rate,
    ProgressKey.METRICS: _metrics,
    ProgressKey.LAST_CHECKPOINT: _record({"step": _count, "path": _string(MAX_STRING), "time": _string(64)}, ("step", "path")),
    # The step this attempt's script resumed from (phalanx_common.report's latest_checkpoint()).
    ProgressKey.RESUMED_STEP: _count,
    # Set by the runtime when it resumed a checkpoint another job uid wrote ("" = unrecorded).
    ProgressKey.RESUMED_FROM: _record({"uid": _string(128), "step": _count}, ("uid", "step")),
    # The built-in runtime's start-up timeline (phalanx_runtime/startup.py).
    ProgressKey.STARTUP: _startup,
}


def _too_deep_text(text: str) -> bool:
    """Nesting beyond MAX_DEPTH, counted before parsing (json.loads recurses per level). One pass
    over the structural characters, linear in the input (a regex for strings backtracks: O(n²))."""
    depth, in_string, escaped = 0, False, -1
    for token in _TOKENS.finditer(text):
        ch, at = token.group(), token.start()
        if at == escaped:
            continue
        if in_string:
            if ch == "\\":
                escaped = at + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _too_deep(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > MAX_DEPTH:
                return True
            stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return False


def decode(raw: bytes | str | dict | None, problems: list[str] | None = None) -> dict | None:
    """``raw`` (bytes, text, or an already-decoded object) as a JSON object within the limits."""
    problems = problems if problems is not None else []
    if raw is None:
        return None
    if isinstance(raw, bytes | bytearray | str):
        if len(raw) > MAX_BYTES:
            problems.append(f"larger than {MAX_BYTES} bytes")
            return None
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
            if _too_deep_text(text):
                problems.append(f"nested deeper than {MAX_DEPTH}")
                return None
            raw = json.loads(text)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            problems.append(f"not JSON: {str(e)[:80]}")
            return None
    if not isinstance(raw, dict):
        problems.append(f"not a JSON object: {type(raw).__name__}")
        return None
    if _too_deep(raw):
        problems.append(f"nested deeper than {MAX_DEPTH}")
        return None
    return raw


def parse_progress(raw: bytes | str | dict | None, problems: list[str] | None = None) -> dict | None:
    """The known, valid fields of a progress report (the runtime's camelCase keys), or None when
    ``raw`` is not a JSON object within the limits. Invalid fields are dropped (and named in
    ``problems``); unknown keys are ignored. Idempotent: parsing a parsed report returns it."""
    problems = problems if problems is not None else []
    obj = decode(raw, problems)
    if obj is None:
        return None
    out: dict[str, Any] = {}
    for key, check in FIELDS.items():
        if obj.get(key) is None:
            continue
        value = check(obj[key])
        if value is _BAD:
            problems.append(f"{key}: invalid value {str(obj[key])[:40]!r}")
            continue
        out[key] = value
        if key == ProgressKey.METRICS and (dropped := dropped_metrics(obj[key], value)):
            problems.append(dropped)
    return out


def loss_not_finite(report: dict | None) -> bool:
    loss = (report or {}).get("loss")
    return loss is not None and not math.isfinite(loss)


def http_body(raw: bytes) -> bytes | None:
    """The body of a complete ``HTTP/1.x 200`` response (read to EOF), else None: another status,
    no end of headers, a body shorter or longer than its Content-Length, or over MAX_BYTES."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = lines[0].split()
    if not sep or len(status) < 2 or status[0] not in (b"HTTP/1.0", b"HTTP/1.1") or status[1] != b"200":
        return None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip() != str(len(body)).encode():
            return None
    return body if len(body) <= MAX_BYTES else None


def progress_port(pod: dict[str, Any]) -> int:
    """The port rank 0 serves progress on: the trainer's container port named ``progress`` (a
    hostNetwork job has its own port block), else the default."""
    containers = (pod.get("spec") or {}).get("containers") or []
    ordered = sorted(containers, key=lambda container: container.get("name") != CONTAINER_NAME)
    for container in ordered:
        for port in container.get("ports") or []:
            number = port.get("containerPort")
            if port.get("name") == PORT_NAME_PROGRESS and type(number) is int and 0 < number < 65536:
                return number
    return PROGRESS_PORT


# --- Into the status ------------------------------------------------------------------------------


def final_progress(pods: list[dict[str, Any]], attempt: int) -> dict[str, Any] | None:
    """Rank 0's final progress, from its termination message (written by the runtime at exit)."""
    for pod in pods:
        if attempt_of(pod) != attempt or pod["metadata"]["labels"].get(LABEL_NODE_RANK) != "0":
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            final = parse_progress(((cs.get("state") or {}).get("terminated") or {}).get("message"))
            if final and "step" in final:
                return final
    return None


def apply_progress(view: StatusView, report: dict[str, Any] | None, total: int | None, uid: str | None) -> None:
    """A parsed progress report (:func:`parse_progress`) into the status. ``total``: the steps the
    spec asks for (the built-in runtime's training.steps); None for a command job, whose script
    says how many it runs (the report's totalSteps)."""
    if not report:
        return
    step = report.get(ProgressKey.STEP)
    if (step is not None and step != view.status.step) or report.get(ProgressKey.PHASE) in PHASES_WITHOUT_STEPS:
        view.status.last_progress_time = view.now  # the hang clock (lifecycle/failures.py _hang) starts again
    view.status.step = step if step is not None else view.status.step
    if total is None:
        view.status.total_steps = report.get(ProgressKey.TOTAL_STEPS, view.status.total_steps)
        total = view.status.total_steps or 0
    if ProgressKey.LOSS in report:
        _apply_loss(view, report[ProgressKey.LOSS])
    if report.get(ProgressKey.TOKENS_PER_SECOND) is not None:
        view.status.tokens_per_second = round(report[ProgressKey.TOKENS_PER_SECOND], 1)
    if view.status.step is not None and total:
        view.status.progress_percentage = min(100, int(100 * view.status.step / total))
    step_time = report.get(ProgressKey.STEP_TIME_SECONDS)
    if step_time and view.status.step is not None and total:  # no total (a script that did not say): no ETA
        view.status.estimated_remaining_seconds = min(MAX_ETA_SECONDS, int(max(0, total - view.status.step) * step_time))
    if report.get(ProgressKey.METRICS):
        view.status.metrics = merged_metrics(view.status.metrics, report[ProgressKey.METRICS])
    if report.get(ProgressKey.LAST_CHECKPOINT):
        view.status.last_checkpoint = CheckpointStatus.model_validate(report[ProgressKey.LAST_CHECKPOINT])
    if report.get(ProgressKey.STARTUP):
        view.status.startup = report[ProgressKey.STARTUP]
    if report.get(ProgressKey.RESUMED_STEP) is not None:
        _resumed_at_step(view, report[ProgressKey.RESUMED_STEP])
    if report.get(ProgressKey.RESUMED_FROM) and report[ProgressKey.RESUMED_FROM]["uid"] != uid:
        _resumed_from_predecessor(view, report[ProgressKey.RESUMED_FROM])


def merged_metrics(before: dict[str, float] | None, reported: dict[str, float]) -> dict[str, float]:
    """status.metrics: each metric's last reported value (a script may report its eval metrics at
    other steps than its training ones), the newly reported first, at most MAX_REPORTED_METRICS."""
    merged = {**reported, **{name: value for name, value in (before or {}).items() if name not in reported}}
    return dict(list(merged.items())[:MAX_REPORTED_METRICS])


def _resumed_at_step(view: StatusView, step: int) -> None:
    """The script of this attempt resumed from its checkpoint at ``step``: status.resumedStep,
    "resumed from step N" in the Running message and one Normal Event per attempt (an attempt
    starts with no resumedStep: lifecycle/attempts.py)."""
    message = f"resumed from step {step}"
    if view.status.resumed_step is None:  # the attempt's first: a report that keeps changing it is no Event each poll
        view.events.append(("Normal", Reason.RESUMED_FROM_CHECKPOINT, message))
    view.status.resumed_step = step
    if view.status.phase == Phase.RUNNING and message not in (view.status.message or ""):
        view.status.message = f"{view.status.message}; {message}" if view.status.message else message


def _apply_loss(view: StatusView, loss: float) -> None:
    """A finite loss goes into the status; NaN/±inf (a diverged run) never does — it is not JSON,
    and the status patch would fail from then on — it sets LossNotFinite and a Warning Event."""
    diverged = get_condition(view.status.conditions, ConditionType.LOSS_NOT_FINITE)
    if math.isfinite(loss):
        view.status.loss = round(loss, 6)
        if diverged is not None and diverged.status == "True":
            view.cond(ConditionType.LOSS_NOT_FINITE, False, Reason.LOSS_FINITE, f"loss {view.status.loss} at step {view.status.step}")
        return
    view.status.loss = None
    message = f"rank 0 reported loss {loss} at step {view.status.step}: training diverged"
    if diverged is None or diverged.status != "True":
        view.events.append(("Warning", Reason.LOSS_NOT_FINITE, message))
    view.cond(ConditionType.LOSS_NOT_FINITE, True, Reason.LOSS_NOT_FINITE, message)


def _resumed_from_predecessor(view: StatusView, resumed: dict[str, Any]) -> None:
    """The runtime resumed a checkpoint another job uid wrote (checkpoint.resume: true, an earlier
    job of this name): say so in the status message, a condition and one Event."""
    who = f"uid {resumed['uid']}" if resumed["uid"] else "an unrecorded uid"
    message = f"resumed from checkpoint step {resumed['step']} of an earlier job with this name ({who})"
    if not is_true(view.status.conditions, ConditionType.RESUMED_FROM_PREDECESSOR):
        view.events.append(("Normal", Reason.RESUMED_FROM_PREDECESSOR, message))
    view.cond(ConditionType.RESUMED_FROM_PREDECESSOR, True, Reason.RESUMED_FROM_PREDECESSOR, message)
    if view.status.phase == Phase.RUNNING and message not in (view.status.message or ""):
        view.status.message = f"{view.status.message}; {message}" if view.status.message else message
