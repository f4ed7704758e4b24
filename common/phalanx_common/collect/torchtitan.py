"""torchtitan's metrics log line (components/metrics.py, ANSI colours stripped):
``step:  1  loss: 12.25510  grad_norm:  3.5000  memory:  1.82GiB(2.30%)  tps: 16,384  tflops:
10.65  mfu: 1.08%`` → step, loss and the metrics grad_norm, tps (tokens/s per device), tflops,
mfu_percent, memory_max_reserved_gib; its validation line ``validate step: 10  loss:  7.9000 ...``
→ the metric ``validation_metrics/loss`` (torchtitan's own name for it)."""

from __future__ import annotations

import re

from phalanx_common.collect.lines import NUMBER, Parsed, count, number, partial, strip_ansi

TRAIN = re.compile(rf"(?<!validate )\bstep:\s*(\d{{1,15}})\s+loss:\s*({NUMBER})")
VALIDATE = re.compile(rf"\bvalidate step:\s*(\d{{1,15}})\s+loss:\s*({NUMBER})")
FIELDS = {
    "grad_norm": re.compile(rf"\bgrad_norm:\s*({NUMBER})"),
    "tps": re.compile(rf"\btps:\s*({NUMBER})"),
    "tflops": re.compile(rf"\btflops:\s*({NUMBER})"),
    "mfu_percent": re.compile(rf"\bmfu:\s*({NUMBER})"),
    "memory_max_reserved_gib": re.compile(rf"\bmemory:\s*({NUMBER})GiB"),
}
VALIDATION_LOSS = "validation_metrics/loss"


def parse(line: str) -> Parsed:
    text = strip_ansi(line)
    found = VALIDATE.search(text)
    if found:
        return partial(metrics={VALIDATION_LOSS: number(found.group(2))})
    found = TRAIN.search(text)
    if not found:
        return {}
    metrics = {name: number(match.group(1)) for name, pattern in FIELDS.items() if (match := pattern.search(text))}
    metrics = {name: value for name, value in metrics.items() if value is not None}
    return partial(step=count(found.group(1)), loss=number(found.group(2)), metrics=metrics)
