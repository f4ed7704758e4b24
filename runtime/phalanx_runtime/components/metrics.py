"""Step metrics: step time, tokens/s, MFU (torchtitan formula), loss, grad norm, peak memory, and
at the steps that evaluated, eval_loss and perplexity; exported per pod on a Prometheus endpoint
(prometheus_client) and, on rank 0, appended as one JSON line per step to ``metrics.jsonl`` in the
checkpoint dir (``phalanx plot``; an evaluation's values are on its step's line). Only a run with a
checkpoint dir writes the file: a pod has one only on its job's checkpoint volume (``phalanx
local`` always, on local disk); without one the Prometheus endpoint and the job status carry the
same figures, and nothing is written (the pod's other writable place, its scratch dir, dies
with it).

Prometheus names: ``phalanx_runtime_`` prefix, base units, ``_total`` on counters, ``_ratio`` for
0-1 values; labels ``namespace``, ``trainingjob`` (never ``job``: the scrape job's label) and
``rank``."""

from __future__ import annotations

import json
import logging
import os
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import torch

from phalanx_common.contract import METRIC_LABEL_JOB, METRIC_LABEL_NAMESPACE, METRICS_LOG_FILE
from phalanx_runtime.env import ENV_CPU_PEAK_FLOPS

log = logging.getLogger("phalanx_runtime")

# Dense peak FLOP/s per device (bf16 tensor core; fp32 = TF32 where it applies).
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989e12, "fp32": 494.5e12},
    "H100": {"bf16": 989e12, "fp32": 494.5e12},  # SXM; PCIe is lower, matched below
    "H100 PCIe": {"bf16": 756e12, "fp32": 378e12},
    "H20": {"bf16": 148e12, "fp32": 74e12},
    "B200": {"bf16": 2250e12, "fp32": 1125e12},
    "GB200": {"bf16": 2500e12, "fp32": 1250e12},
    "A100": {"bf16": 312e12, "fp32": 156e12},
    "A10G": {"bf16": 125e12, "fp32": 62.5e12},
    "L40S": {"bf16": 362e12, "fp32": 183e12},
    "L4": {"bf16": 121e12, "fp32": 60e12},
    "MI300X": {"bf16": 1307e12, "fp32": 654e12},
}


def device_peak_flops(device: torch.device, precision: str) -> tuple[float, str]:
    """(peak FLOP/s of one device, where the figure came from)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key in sorted(PEAK_FLOPS, key=len, reverse=True):
            if key in name:
                return PEAK_FLOPS[key][precision], f"table:{key}"
        return PEAK_FLOPS["A100"][precision], f"table:unknown({name})->A100"
    if os.environ.get(ENV_CPU_PEAK_FLOPS):
        return float(os.environ[ENV_CPU_PEAK_FLOPS]), "env"
    return measure_cpu_peak(), "measured"


def measure_cpu_peak(n: int = 512, iters: int = 8, trials: int = 3) -> float:
    """fp32 GEMM FLOP/s of this process's threads (the MFU denominator on CPU): best of
    ``trials`` (a shared machine only ever makes a trial slower). Every rank measures at start,
    all at once on a pod's CPUs: a 512² GEMM reaches the same rate as larger ones in a few
    hundredths of a second, where 1024² would cost each rank near a second of a shared CPU."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = 0.0
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(iters):
            a @ b
        best = max(best, 2 * n**3 * iters / (time.perf_counter() - t))
    return best


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


@dataclass
class StepMetrics:
    step: int
    loss: float
    grad_norm: float
    lr: float
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_device: float
    mfu: float
    peak_memory_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


PREFIX = "phalanx_runtime_"
RANK_LABEL = "rank"
# name → help; gauges hold the last step's value.
GAUGES = {
    "step": "Last optimizer step",
    "loss": "Training loss of the last step (global mean)",
    "grad_norm": "Global gradient norm of the last step, before clipping",
    "learning_rate": "Learning rate of the last step",
    "tokens_per_second": "Global training throughput of the last step",
    "mfu_ratio": "Model FLOPs utilisation of the last step (0-1)",
    "peak_memory_bytes": "Peak memory of this process",
}
# name → help; a series appears at the first evaluation and holds the last one's value.
EVAL_GAUGES = {
    "eval_loss": "Held-out loss of the last evaluation (token mean)",
    "perplexity": "exp(eval_loss) of the last evaluation",
}
TOKENS_TOTAL = "tokens_total"  # counter: global tokens trained by this gang since it started
STEP_DURATION = "step_duration_seconds"  # histogram
STEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300)


def exported_names() -> set[str]:
    """Every sample name the runtime exports (dashboards and alerts may use only these)."""
    hist = {f"{PREFIX}{STEP_DURATION}_{s}" for s in ("bucket", "sum", "count")}
    return {PREFIX + g for g in (*GAUGES, *EVAL_GAUGES)} | {PREFIX + TOKENS_TOTAL} | hist


def metric_labels(namespace: str, job: str, rank: int) -> dict[str, str]:
    return {METRIC_LABEL_NAMESPACE: namespace, METRIC_LABEL_JOB: job, RANK_LABEL: str(rank)}


def metrics_log_path(checkpoint_dir: str | os.PathLike | None) -> Path | None:
    """``<checkpoint dir>/metrics.jsonl``; None (no file) for a run without a checkpoint dir."""
    return Path(checkpoint_dir) / METRICS_LOG_FILE if checkpoint_dir else None


class PromMetrics:
    """The runtime's series in their own registry (one process, one label set)."""

    def __init__(self, labels: dict[str, str]):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        keys, values = sorted(labels), [labels[k] for k in sorted(labels)]

        def child(metric):
            return metric.labels(*values) if keys else metric

        self.gauges = {k: child(Gauge(PREFIX + k, h, keys, registry=self.registry)) for k, h in GAUGES.items()}
        # Children made at the first evaluation: no series claims a value before there is one.
        self._eval_gauges = {k: Gauge(PREFIX + k, h, keys, registry=self.registry) for k, h in EVAL_GAUGES.items()}
        self._eval_child = child
        self.tokens = child(Counter(PREFIX + TOKENS_TOTAL, "Global tokens trained since this gang started",
                                    keys, registry=self.registry))
        self.step_duration = child(Histogram(PREFIX + STEP_DURATION, "Wall time per training step", keys,
                                             buckets=STEP_BUCKETS, registry=self.registry))

    def record(self, m: StepMetrics, tokens: int) -> None:
        for key, value in (("step", m.step), ("loss", m.loss), ("grad_norm", m.grad_norm), ("learning_rate", m.lr),
                           ("tokens_per_second", m.tokens_per_s), ("mfu_ratio", m.mfu),
                           ("peak_memory_bytes", m.peak_memory_bytes)):
            self.gauges[key].set(value)
        self.tokens.inc(tokens)
        self.step_duration.observe(m.step_time_s)

    def record_eval(self, evaluated: dict[str, float]) -> None:
        for key, value in evaluated.items():
            if key in self._eval_gauges:
                self._eval_child(self._eval_gauges[key]).set(value)


class StepLog:
    """Appends one JSON line per step (``time`` = Unix seconds); a resumed gang appends after
    the steps it repeats, so readers keep the last line of each step."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file: IO[str] | None = None
        self._broken = False  # after a write error: off for the run, not retried every step

    def write(self, m: StepMetrics, extra: dict[str, float] | None = None) -> None:
        """The step's line: ``m`` and ``extra`` (the step's evaluation, when it had one)."""
        if self._broken:
            return
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", buffering=1)  # line-buffered, kept open
            self._file.write(json.dumps({"time": round(time.time(), 3), **m.to_dict(), **(extra or {})}, allow_nan=True) + "\n")
        except OSError as e:  # shared storage trouble must not stop training
            log.warning("metrics log %s: %s; no more lines are written to it in this run", self.path, e)
            self._file, self._broken = None, True


class MetricsLogger:
    def __init__(self, *, flops_per_token: float | None, peak_flops: float, world_size: int,
                 tokens_per_step: int, device: torch.device, prometheus_port: int | None = None,
                 labels: dict | None = None, log_path: str | os.PathLike | None = None):
        self.flops_per_token, self.peak_flops = flops_per_token, peak_flops
        self.world_size, self.tokens_per_step, self.device = world_size, tokens_per_step, device
        self.prom: PromMetrics | None = None
        self.log = StepLog(log_path) if log_path else None
        if prometheus_port:
            self._start_prometheus(prometheus_port, labels or {})

    def _start_prometheus(self, port: int, labels: dict) -> None:
        try:
            from prometheus_client import start_http_server
        except ImportError:
            log.warning("prometheus_client not installed; no metrics endpoint")
            return
        prom = PromMetrics(labels)
        try:
            start_http_server(port, registry=prom.registry)
        except OSError as e:
            log.warning("metrics endpoint on port %s failed: %s", port, e)
            return
        self.prom = prom

    def record(self, *, step: int, loss: float, grad_norm: float, lr: float, step_time: float,
               evaluated: dict[str, float] | None = None) -> StepMetrics:
        """The step's metrics, exported and logged; ``evaluated``: the eval metrics of an evaluation
        after this step."""
        tps = self.tokens_per_step / step_time if step_time > 0 else 0.0
        per_dev = tps / self.world_size
        mfu = (self.flops_per_token * per_dev / self.peak_flops) if self.flops_per_token and self.peak_flops else 0.0
        m = StepMetrics(step, loss, grad_norm, lr, step_time, tps, per_dev, mfu, peak_memory_bytes(self.device))
        if self.prom:
            self.prom.record(m, self.tokens_per_step)
            if evaluated:
                self.prom.record_eval(evaluated)
        if self.log:
            self.log.write(m, evaluated)
        return m
