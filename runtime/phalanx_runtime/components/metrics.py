"""Step metrics: step time, tokens/s, MFU (torchtitan formula), loss, grad norm, peak memory;
exported per pod on a Prometheus endpoint (prometheus_client)."""

from __future__ import annotations

import logging
import os
import resource
import time
from dataclasses import asdict, dataclass

import torch

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
CPU_PEAK_ENV = "PHALANX_CPU_PEAK_FLOPS"


def device_peak_flops(device: torch.device, precision: str) -> tuple[float, str]:
    """(peak FLOP/s of one device, where the figure came from)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key in sorted(PEAK_FLOPS, key=len, reverse=True):
            if key in name:
                return PEAK_FLOPS[key][precision], f"table:{key}"
        return PEAK_FLOPS["A100"][precision], f"table:unknown({name})->A100"
    if os.environ.get(CPU_PEAK_ENV):
        return float(os.environ[CPU_PEAK_ENV]), "env"
    return measure_cpu_peak(), "measured"


def measure_cpu_peak(n: int = 1024, iters: int = 4, trials: int = 3) -> float:
    """fp32 GEMM FLOP/s of this process's threads (the MFU denominator on CPU): best of
    ``trials`` (a shared machine only ever makes a trial slower)."""
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


class MetricsLogger:
    def __init__(self, *, flops_per_token: float | None, peak_flops: float, world_size: int,
                 tokens_per_step: int, device: torch.device, prometheus_port: int | None = None,
                 labels: dict | None = None):
        self.flops_per_token, self.peak_flops = flops_per_token, peak_flops
        self.world_size, self.tokens_per_step, self.device = world_size, tokens_per_step, device
        self.gauges = None
        if prometheus_port:
            self._start_prometheus(prometheus_port, labels or {})

    def _start_prometheus(self, port: int, labels: dict) -> None:
        try:
            from prometheus_client import CollectorRegistry, Gauge, start_http_server
        except ImportError:
            log.warning("prometheus_client not installed; no metrics endpoint")
            return
        reg = CollectorRegistry()
        names = {"step": "Optimizer steps done", "loss": "Training loss (global mean)",
                 "grad_norm": "Global gradient norm before clipping", "lr": "Learning rate",
                 "step_time_seconds": "Wall time of the last step", "tokens_per_second": "Global tokens/s",
                 "mfu": "Model FLOPs utilisation (0-1)", "peak_memory_bytes": "Peak memory of this process"}
        keys = sorted(labels)
        self.gauges = {k: Gauge(f"phalanx_{k}", d, keys, registry=reg) for k, d in names.items()}
        self._labels = labels
        try:
            start_http_server(port, registry=reg)
        except OSError as e:
            log.warning("metrics endpoint on port %s failed: %s", port, e)
            self.gauges = None

    def record(self, *, step: int, loss: float, grad_norm: float, lr: float, step_time: float) -> StepMetrics:
        tps = self.tokens_per_step / step_time if step_time > 0 else 0.0
        per_dev = tps / self.world_size
        mfu = (self.flops_per_token * per_dev / self.peak_flops) if self.flops_per_token and self.peak_flops else 0.0
        m = StepMetrics(step, loss, grad_norm, lr, step_time, tps, per_dev, mfu, peak_memory_bytes(self.device))
        if self.gauges:
            vals = {"step": step, "loss": loss, "grad_norm": grad_norm, "lr": lr, "step_time_seconds": step_time,
                    "tokens_per_second": tps, "mfu": mfu, "peak_memory_bytes": m.peak_memory_bytes}
            for k, v in vals.items():
                g = self.gauges[k].labels(**self._labels) if self._labels else self.gauges[k]
                g.set(v)
        return m
