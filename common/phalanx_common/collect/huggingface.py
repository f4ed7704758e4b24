"""The transformers Trainer's (and TRL's) console output: its tqdm bar ``12/100 [...]`` gives the
step and the total steps; the dicts it prints at each log — ``{'loss': ..., 'grad_norm': ...,
'learning_rate': ..., 'epoch': ...}``, ``{'eval_loss': ...}`` — give the loss, the epoch and
every other numeric value as a metric (transformers 5 prints the values as strings, earlier
versions as numbers: both are read). A dict is read with ``ast.literal_eval`` (a literal, never
code) and only from a bounded line. An evaluation's nested bar is not the training's and is
skipped."""

from __future__ import annotations

import ast

from phalanx_common.collect.lines import Parsed, number, partial, strip_ansi, tqdm_count

MAX_DICT_CHARS = 4096
LOSS = "loss"
EPOCH = "epoch"


def parse(line: str) -> Parsed:
    bar = tqdm_count(line)
    if bar is not None:
        return partial(step=bar[0], total_steps=bar[1] or None)
    text = strip_ansi(line).strip()
    if not (text.startswith("{") and text.endswith("}")) or len(text) > MAX_DICT_CHARS:
        return {}
    try:
        logged = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return {}
    if not isinstance(logged, dict):
        return {}
    values = {name: _value(value) for name, value in logged.items() if isinstance(name, str)}
    values = {name: value for name, value in values.items() if value is not None}
    loss, epoch = values.pop(LOSS, None), values.pop(EPOCH, None)
    return partial(loss=loss, epoch=epoch, metrics=values)


def _value(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return number(value) if isinstance(value, str) else None
