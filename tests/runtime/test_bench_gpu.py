"""bench/gpu.sh --dry-run: the GPU machine's benchmark end to end on the CPU (gloo, 2 ranks; the
debug and tiny presets; a tiny Llama), as CI can run it: every part leaves its result, and the
table lands in the run's own copy of docs/benchmarks.md, never in docs/benchmarks.md itself."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = "<!-- bench: gpu -->"

pytestmark = pytest.mark.timeout(240)


def test_the_dry_run_measures_every_part_and_writes_its_table(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_BENCH_UNDER_TIMEOUT", "DRY_RUN")}
    env["OUT"] = str(tmp_path)
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh"), "--dry-run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=200)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(tmp_path.glob("*.log")))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:] + logs

    res = json.loads((tmp_path / "gpu_results.json").read_text())
    assert res["dry_run"] is True and res["command"] == "bench/gpu.sh --dry-run"
    ar = res["allreduce"]
    assert ar["backend"] == "gloo" and ar["world"] == 2 and [r["bytes"] for r in ar["rows"]] == [2**20, 4 * 2**20]
    for r in ar["rows"]:  # n = 2: busbw = algbw × 2(n−1)/n = algbw
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"]) and r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
    assert [m["best"]["preset"] for m in res["mfu"]] == ["debug", "tiny"]
    for m in res["mfu"]:
        assert m["best"]["tokens_per_s"] > 0 and m["peak_flops"] > 0 and m["gemm_flops"] > 0
    imp = res["hf_import"]
    assert [r["loader"] for r in imp["rows"]] == ["transformers from_pretrained", "phalanx import (DCP, sharded)"]
    assert imp["parity"]["rel_diff"] <= 1e-5  # the import computes transformers' logits

    text = (tmp_path / "benchmarks.md").read_text()
    block = text[text.index(BLOCK):text.index("<!-- end bench -->", text.index(BLOCK))]
    assert block.count(BLOCK) == 1 and "**DRY RUN" in block and "`bench/gpu.sh --dry-run`" in block
    assert "| 1 MiB |" in block and "| 4 MiB |" in block
    assert "| debug |" in block and "| tiny |" in block and "| transformers from_pretrained | 1 |" in block
    # the rest of the page is the repository's: the run changed its own block only
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    assert "**DRY RUN" not in doc and text.split(BLOCK)[0] == doc.split(BLOCK)[0]
