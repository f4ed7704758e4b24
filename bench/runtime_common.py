"""Shared helpers of the runtime benchmarks: machine line, appending results to the runtime
sections of docs/benchmarks.md (other teams own the other sections)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
SECTIONS = {
    "overhead": "### Runtime (a): step time vs plain torch (DDP, FSDP, 2 ranks)",
    "zero3": "### Runtime (b): ZeRO-3 model-state bytes per rank vs 16Ψ/N",
    "bubble": "### Runtime (c): pipeline bubble, measured vs (p−1)/(m+p−1)",
    "cpu": "### Runtime (d): tokens/s on CPU",
    "gpu": "### Runtime (e): single GPU (MFU, bf16)",
}
RUNTIME_HEADING = "## Runtime"
# A run of ranks (spawn.run_ranks) that takes longer is hung: its ranks are killed, the bench fails.
RANKS_TIMEOUT_S = 1800


def machine() -> str:
    import torch

    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{cpu}, {os.cpu_count()} cores, {dev}, torch {torch.__version__}, Python "
            f"{platform.python_version()}, load avg {load:.1f} at start")


def append_result(section: str, body: str, *, command: str | None = None) -> None:
    """Append a dated entry under the runtime subsection ``section`` of docs/benchmarks.md."""
    command = command or "python " + " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    entry = (f"\n**{_dt.date.today().isoformat()}** — {machine()}. Command: `{command}`\n\n{body.strip()}\n")
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if RUNTIME_HEADING + "\n" not in text:
        text = text.rstrip("\n") + f"\n\n{RUNTIME_HEADING}\n\nNumbers from `bench/runtime_*.py` (see docs/runtime.md).\n"
        for h in SECTIONS.values():
            text += f"\n{h}\n"
    heading = SECTIONS[section]
    if heading not in text:
        text = text.rstrip("\n") + f"\n\n{heading}\n"
    start = text.index(heading) + len(heading)
    nxt = re.search(r"^#{2,3} ", text[start:], flags=re.M)
    end = start + nxt.start() if nxt else len(text)
    text = text[:end].rstrip("\n") + "\n" + entry + ("\n" + text[end:] if nxt else "")
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
