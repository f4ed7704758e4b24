"""PyTorch Lightning's progress bar (tqdm or rich) → the step (approximate: epochs × batches per
epoch + batch), the epoch, the loss and the bar's metrics. The tqdm bar (TQDMProgressBar):
``Epoch E: 40%|████ | b/B [00:01<00:02, 4.1it/s, v_num=0, train_loss=2.30, val_loss=2.41]``; the
rich bar (RichProgressBar, the default where ``rich`` is installed; without a terminal it prints
once, at the end): ``Epoch E/M ━━━ b/B 0:00:01 • 0:00:02 4.1it/s v_num: 0.000`` with one
``name: value`` per continuation line, indented under it.

The step is ``E * B + b``: approximate — it assumes every epoch has B batches and one optimizer
step per batch (gradient accumulation makes Lightning's global_step smaller). The rich bar's
``E/M`` also gives the total, ``(M + 1) * B`` (M is negative when only max_steps bounds the run). The bar's values (``prog_bar=True``) are metrics,
``v_num`` (the logger's version) excepted; ``loss`` or ``train_loss`` (or its ``_step`` form) is
the loss."""

from __future__ import annotations

import re

from phalanx_common.collect.lines import Parsed, key_values, partial, strip_ansi

LOSS_NAMES = ("loss", "train_loss", "train_loss_step", "loss_step")
NOT_METRICS = ("v_num",)
TQDM = re.compile(r"^Epoch (\d{1,9}):\s.*?\|\s*(\d{1,12})/(\d{1,12}) \[([^\]]*)\]")
RICH = re.compile(r"^Epoch (\d{1,9})/(-?\d{1,9})\s.*?\s(\d{1,12})/(\d{1,12})\s+\d+:\d\d:\d\d(.*)$")
RICH_CONTINUATION = re.compile(r"^\s{20,}[A-Za-z_][\w./-]*: \S+\s*$")


def parse(line: str) -> Parsed:
    text = strip_ansi(line)
    found = TQDM.match(text)
    if found:
        epoch, done, per_epoch = (int(found.group(i)) for i in (1, 2, 3))
        return _record(epoch, done, per_epoch, None, key_values(found.group(4), "="))
    found = RICH.match(text)
    if found:
        epoch, last_epoch, done, per_epoch = (int(found.group(i)) for i in (1, 2, 3, 4))
        total = (last_epoch + 1) * per_epoch if last_epoch >= 0 else None  # -2: max_epochs -1 (max_steps)
        return _record(epoch, done, per_epoch, total, key_values(found.group(5), ":"))
    if RICH_CONTINUATION.match(text):
        return _values(key_values(text, ":"))
    return {}


def _record(epoch: int, done: int, per_epoch: int, total: int | None, values: dict[str, float]) -> Parsed:
    record = _values(values)
    step = epoch * per_epoch + done
    fraction = epoch + (done / per_epoch if per_epoch else 0.0)
    return {**record, **partial(step=step, total_steps=total or None, epoch=fraction)}


def _values(values: dict[str, float]) -> Parsed:
    metrics = {name: value for name, value in values.items() if name not in NOT_METRICS}
    loss = next((metrics[name] for name in LOSS_NAMES if name in metrics), None)
    return partial(loss=loss, metrics=metrics)
