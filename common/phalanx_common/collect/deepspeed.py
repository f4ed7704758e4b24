"""DeepSpeed's log lines: the engine's ``[Rank 0] step=3, skipped=0, lr=[0.1], mom=[0]``
(``steps_per_print``, at INFO) → step and the metrics learning_rate (the first group's),
skipped_steps; its throughput timer's ``epoch=0/micro_step=3/global_step=3,
RunningAvgSamplesPerSec=..., CurrSamplesPerSec=...`` → step, epoch, samples_per_second; the
pipeline engine's ``steps: 3 loss: 0.4163 iter time (s): 0.001 samples/sec: 3629.075`` → step,
loss, iter_time_seconds, samples_per_second. The plain engine prints no loss: a script that
prints its own needs the regex collector (or reports it: phalanx_common.report)."""

from __future__ import annotations

import re

from phalanx_common.collect.lines import NUMBER, Parsed, count, number, partial, strip_ansi

ENGINE = re.compile(rf"\bstep=(\d{{1,15}}), skipped=(\d{{1,15}}), lr=\[\s*({NUMBER})?")
TIMER = re.compile(rf"\bepoch=(\d{{1,12}})/micro_step=\d+/global_step=(\d{{1,15}}),.*?\bCurrSamplesPerSec=({NUMBER})")
PIPELINE = re.compile(rf"^steps: (\d{{1,15}}) loss: ({NUMBER})")
PIPELINE_TIMES = re.compile(rf"iter time \(s\): ({NUMBER}) samples/sec: ({NUMBER})")


def parse(line: str) -> Parsed:
    text = strip_ansi(line).strip()
    found = ENGINE.search(text)
    if found:
        metrics = {"skipped_steps": number(found.group(2)), "learning_rate": number(found.group(3))}
        return partial(step=count(found.group(1)), metrics=_present(metrics))
    found = TIMER.search(text)
    if found:
        return partial(step=count(found.group(2)), epoch=number(found.group(1)),
                       metrics=_present({"samples_per_second": number(found.group(3))}))
    found = PIPELINE.match(text)
    if found:
        times = PIPELINE_TIMES.search(text)
        metrics = {"iter_time_seconds": number(times.group(1)), "samples_per_second": number(times.group(2))} \
            if times else {}
        return partial(step=count(found.group(1)), loss=number(found.group(2)), metrics=_present(metrics))
    return {}


def _present(metrics: dict) -> dict:
    return {name: value for name, value in metrics.items() if value is not None}
