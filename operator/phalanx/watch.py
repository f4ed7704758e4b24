"""`phalanx watch`: follow one TrainingJob's status until it finishes, a line per change, with
the loss as a sparkline on each line and the loss and tokens/s curves as charts: redrawn in place
under the lines on a terminal, printed once at the end otherwise."""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

from phalanx import constants
from phalanx.termchart import chart, sparkline

FINISHED = {"Succeeded": 0, "Failed": 1}
CHART_WIDTH = 60
WATCH_METRICS = 3  # reported metrics on a status line (status.metrics has up to 32)
ERASE_LINES_UP = "\x1b[{n}F\x1b[J"  # cursor to the start of the line n up, clear to the end


def progress_line(status: dict[str, Any]) -> str:
    """One human line from a TrainingJob status: phase, nodes, step, loss, tokens/s, reported
    metrics, checkpoint."""
    parts = [f"{status.get('phase') or 'Pending':<10}", f"nodes {status.get('nodes', '0/0')}"]
    if isinstance(status.get("rolesReady"), str):
        parts.append(f"roles {status['rolesReady']}")
    if status.get("step") is not None:
        total = status.get("totalSteps")
        parts.append(f"step {status['step']}" + (f"/{total}" if total else ""))
    if status.get("loss") is not None:
        parts.append(f"loss {status['loss']:.4f}")
    if status.get("tokensPerSecond") is not None:
        parts.append(f"{status['tokensPerSecond']:.0f} tok/s")
    parts += _metric_words(status.get("metrics"))
    if status.get("restarts"):
        parts.append(f"restarts {status['restarts']}")
    ckpt = status.get("lastCheckpoint") or {}
    if ckpt.get("step") is not None:
        parts.append(f"checkpoint step-{ckpt['step']}")
    reason = _latest_reason(status)
    if reason:
        parts.append(f"({reason})")
    return "  ".join(parts)


def _metric_words(metrics: Any) -> list[str]:
    """The first WATCH_METRICS reported metrics as "name value" (then "+N metrics")."""
    if not isinstance(metrics, dict) or not metrics:
        return []
    numbers = [(name, value) for name, value in metrics.items() if isinstance(value, int | float)]
    words = [f"{name} {value:.4g}" for name, value in numbers[:WATCH_METRICS]]
    return words + ([f"+{len(numbers) - WATCH_METRICS} metrics"] if len(numbers) > WATCH_METRICS else [])


def _latest_reason(status: dict[str, Any]) -> str | None:
    conditions = sorted(status.get("conditions") or [], key=lambda c: c.get("lastTransitionTime") or "")
    if not conditions:
        return None
    last = conditions[-1]
    return f"{last.get('type')}={last.get('status')}: {last.get('reason')}"


class Curve:
    """One point per new step seen in the status: (step, loss, tokens/s)."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.loss: list[float] = []
        self.tokens_per_second: list[float] = []

    def add(self, status: dict[str, Any]) -> bool:
        step, loss = status.get("step"), status.get("loss")
        if step is None or loss is None or (self.steps and self.steps[-1] == step):
            return False
        tps = status.get("tokensPerSecond")
        self.steps.append(int(step))
        self.loss.append(float(loss))
        self.tokens_per_second.append(float(tps) if tps is not None else math.nan)
        return True

    def sparkline(self) -> str:
        return f"  loss {sparkline(self.loss)}" if len(self.loss) > 1 else ""

    def charts(self, width: int = CHART_WIDTH) -> list[str]:
        return (chart(self.steps, self.loss, title="loss", width=width)
                + chart(self.steps, self.tokens_per_second, title="tokens/s", width=width))


class Screen:
    """Lines scroll; on a terminal the charts stay under them, redrawn on each new line."""

    def __init__(self, out: TextIO, live: bool):
        self.out, self.live, self.drawn = out, live, 0

    def line(self, text: str, charts: list[str]) -> None:
        if self.drawn:
            self.out.write(ERASE_LINES_UP.format(n=self.drawn))
        print(text, file=self.out, flush=not self.live)
        self.drawn = 0
        if self.live and charts:
            print("\n".join(charts), file=self.out)
            self.drawn = len(charts)
        self.out.flush()

    def final(self, charts: list[str]) -> None:
        """At the end: the charts, unless they are already on screen."""
        if not self.drawn and charts:
            print("\n".join(charts), file=self.out, flush=True)


def _is_tty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def watch(api: Any, name: str, namespace: str, timeout: float, out: TextIO = sys.stdout, every: float = 2.0,
          charts: bool = True) -> int:
    """Print a line whenever the status line changes; exit code 0 Succeeded, 1 Failed, 3 timeout."""
    deadline = time.monotonic() + timeout
    last = None
    curve = Curve()
    screen = Screen(out, live=charts and _is_tty(out))
    while time.monotonic() < deadline:
        obj = api.get_namespaced_custom_object(constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name)
        status = obj.get("status") or {}
        curve.add(status)
        line = progress_line(status)
        if line != last:
            screen.line(f"{time.strftime('%H:%M:%S')}  {name}  {line}{curve.sparkline()}",
                        curve.charts() if charts else [])
            last = line
        if status.get("phase") in FINISHED:
            if charts:
                screen.final(curve.charts())
            if status.get("message"):
                print(f"{name}: {status['message']}", file=out)
            return FINISHED[status["phase"]]
        time.sleep(every)
    print(f"{name}: not finished after {timeout:.0f}s", file=out)
    return 3
