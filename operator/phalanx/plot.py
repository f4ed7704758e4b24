"""`phalanx plot`: a PNG of a job's curves (loss, tokens/s, MFU, step time, and any metric a script
reported) from the per-step log rank 0 appends on shared storage (``<checkpoint dir>/metrics.jsonl``:
the built-in runtime's, or ``phalanx_common.report``'s for a command job, with the same keys)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.constants import METRICS_LOG_FILE, ProgressKey
from phalanx_common.storage import is_object_uri

# (record key, panel title, scale): one panel each.
PANELS = (
    ("loss", "loss", 1.0),
    ("tokens_per_s", "tokens/s", 1.0),
    ("mfu", "MFU %", 100.0),
    ("step_time_s", "step time (s)", 1.0),
)
EMA_MIN_ALPHA, EMA_MAX_ALPHA = 0.02, 0.5  # the smoothed loss line


@dataclass
class Curves:
    """One record per step (the last one logged: a resumed gang repeats steps after its checkpoint)
    and the checkpoint steps later gangs resumed from."""

    records: list[dict[str, Any]] = field(default_factory=list)
    resumes: list[int] = field(default_factory=list)

    def series(self, key: str, scale: float = 1.0) -> tuple[list[int], list[float]]:
        """(steps, values) of ``key``: a record's own key, or a reported metric of that name."""
        points = [(r["step"], value) for r in self.records if (value := record_value(r, key)) is not None]
        return [step for step, _ in points], [value * scale for _, value in points]


def record_value(record: dict[str, Any], key: str) -> float | None:
    """``record[key]``, else ``record["metrics"][key]`` (where a reporter may nest what the script
    reported), when it is a number."""
    metrics = record.get(ProgressKey.METRICS)
    for value in (record.get(key), metrics.get(key) if isinstance(metrics, dict) else None):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def panels(curves: Curves, metrics: tuple[str, ...] = ()) -> list[tuple[str, str, float]]:
    """The panels to draw: the loss, the other PANELS that have points (a command job's log may have
    no MFU or step time), then one per metric asked for."""
    shown = [p for p in PANELS if p[0] == "loss" or curves.series(p[0])[0]]
    return shown + [(name, name, 1.0) for name in metrics if name not in {p[0] for p in shown}]


def log_path(path: str | Path) -> Path | str:
    """A checkpoint dir (``<mountPath>/<namespace>/<job>``) or the log file itself; in object
    storage (checkpoint.storage's ``<uri>/<namespace>/<job>``) the copy rank 0 keeps there."""
    if is_object_uri(str(path)):
        uri = str(path).rstrip("/")
        return uri if uri.endswith(".jsonl") else f"{uri}/{METRICS_LOG_FILE}"
    p = Path(path)
    return p / METRICS_LOG_FILE if p.is_dir() else p


def _log_text(path: str | Path) -> str:
    where = log_path(path)
    if isinstance(where, Path):
        return where.read_text()
    import fsspec  # the objectstore extra (cmd_plot checks it)

    with fsspec.open(where, "rb") as f:
        return f.read().decode()


def read_curves(path: str | Path) -> Curves:
    """Parse the log; lines that are not JSON records with a step (a torn last line) are skipped."""
    by_step: dict[int, dict[str, Any]] = {}
    resumes: list[int] = []
    prev = 0
    for line in _log_text(path).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
            continue
        step = rec["step"]
        if step <= prev:  # a new gang went on from its checkpoint at step - 1
            resumes.append(step - 1)
        prev = step
        by_step[step] = rec
    return Curves([by_step[s] for s in sorted(by_step)], resumes)


def smoothing(points: int) -> float:
    """EMA weight of the newest point: about a tenth of the run in the window."""
    return min(EMA_MAX_ALPHA, max(EMA_MIN_ALPHA, 10 / max(points, 1)))


def ema(values: list[float], alpha: float) -> list[float]:
    """Debiased exponential moving average (as TensorBoard smooths): no pull towards the first
    value; non-finite values are skipped."""
    out: list[float] = []
    acc, weight = 0.0, 0.0
    for v in values:
        if math.isfinite(v):
            acc = (1 - alpha) * acc + alpha * v
            weight = (1 - alpha) * weight + alpha
        out.append(acc / weight if weight else math.nan)
    return out


def write_png(curves: Curves, out: str | Path, title: str = "", metrics: tuple[str, ...] = ()) -> Path:
    """A panel per curve (:func:`panels`) over the step, two a row, dashed lines where a gang resumed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = panels(curves, metrics)
    rows, cols = math.ceil(len(shown) / 2), min(2, len(shown))
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.25 * rows), sharex=True, squeeze=False)
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    for ax, (key, label, scale) in zip(axes.flat, shown, strict=False):
        steps, values = curves.series(key, scale)
        ax.plot(steps, values, lw=1, alpha=0.45 if key == "loss" else 0.9, color="tab:blue")
        if key == "loss" and len(values) > 2:
            alpha = smoothing(len(values))
            ax.plot(steps, ema(values, alpha), lw=2, color="tab:blue", label=f"EMA α={alpha:.2g}")
            ax.legend(loc="upper right", fontsize=8)
        for step in curves.resumes:
            ax.axvline(step, ls="--", lw=0.8, color="tab:red")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes.flat[max(0, len(shown) - cols):len(shown)]:
        ax.set_xlabel("step")
    fig.suptitle(title or "training curves")
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def summary(curves: Curves) -> str:
    steps, loss = curves.series("loss")
    if not steps:
        return "no steps logged"
    resumed = f", resumed from step {', '.join(map(str, curves.resumes))}" if curves.resumes else ""
    return f"steps {steps[0]}–{steps[-1]}, loss {loss[0]:.4f} → {loss[-1]:.4f}{resumed}"
