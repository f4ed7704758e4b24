"""Shared helpers of the runtime benchmarks: machine line, and writing a result into
docs/benchmarks.md — a page of current results, so a run replaces its own previous result."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
SECTIONS = {
    "overhead": "### Runtime (a): step time vs plain torch (DDP, FSDP, 2 ranks)",
    "zero3": "### Runtime (b): ZeRO-3 model-state bytes per rank vs 16Ψ/N",
    "bubble": "### Runtime (c): pipeline bubble, measured vs (p−1)/(m+p−1)",
    "cpu": "### Runtime (d): tokens/s on CPU",
    "gpu": "### Runtime (e): a GPU machine (NCCL all-reduce, MFU in bf16, Hugging Face import)",
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


def commit() -> str:
    """The commit measured (``-dirty`` with uncommitted changes), for the result's header."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    return (git("rev-parse", "--short", "HEAD") or "unknown") + ("-dirty" if git("status", "--porcelain", "-uno") else "")


def append_result(section: str, body: str, *, command: str | None = None) -> None:
    """This run's result as the runtime subsection ``section``'s current one in docs/benchmarks.md."""
    command = command or "python " + " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    entry = (f"**{_dt.date.today().isoformat()}**, commit {commit()} — {machine()}. Command: `{command}`"
             f"\n\n{body.strip()}")
    write_result(section, SECTIONS[section], entry, parent=RUNTIME_HEADING)


def write_result(name: str, heading: str, body: str, *, parent: str | None = None, doc: Path = DOC) -> None:
    """Put ``body`` between ``<!-- bench: name -->`` and ``<!-- end bench -->`` in ``doc``, replacing
    the previous result there (history lives in git); the block goes right under ``heading`` (made,
    under ``parent``, when missing), so the prose around it stays."""
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    begin, end = f"<!-- bench: {name} -->", "<!-- end bench -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    if begin in text:
        start = text.index(begin)
        stop = text.index(end, start) + len(end)
        text = text[:start] + block + text[stop:]
    else:
        if heading not in text:
            text = _with_heading(text, heading, parent)
        at = text.index(heading) + len(heading)
        text = text[:at] + f"\n\n{block}\n\n" + text[at:].lstrip("\n")
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text.rstrip("\n") + "\n")


def _with_heading(text: str, heading: str, parent: str | None) -> str:
    """``text`` with ``heading`` added at the end of ``parent``'s section (made at the end when
    missing), or at the end without a parent."""
    if parent and parent + "\n" not in text:
        text = text.rstrip("\n") + f"\n\n{parent}\n"
    if not parent:
        return text.rstrip("\n") + f"\n\n{heading}\n"
    start = text.index(parent + "\n") + len(parent)
    nxt = text.find("\n## ", start)
    end = len(text) if nxt < 0 else nxt
    return text[:end].rstrip("\n") + f"\n\n{heading}\n" + ("\n" + text[end:].lstrip("\n") if nxt >= 0 else "")


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
