"""framework: deepspeed command jobs through `phalanx local`: a DeepSpeed user
script (deepspeed_user_script.py) under torchrun, 2 processes, ZeRO 1/2/3 with the config Phalanx
rendered from the spec; the per-step losses match a single-process plain-torch reference of the
same model, data, optimizer, clipping and gradient accumulation; and, with the built-in runtime's
debug transformer, data, AdamW and LR schedule, the losses of the built-in runtime's own ZeRO-3 job
with the same training spec (2 processes).

Needs DeepSpeed (`pip install -e '.[deepspeed]'`): skipped without it, failed in CI
(PHALANX_REQUIRE_CLUSTER set asks for every suite)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.runtime.runtime_parity_util import TINY_OVERRIDES, job, max_rel

pytestmark = pytest.mark.runtime

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "deepspeed_user_script.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
STEPS, GLOBAL_BATCH, MICRO, LR, CLIP = 5, 8, 2, 0.01, 1.0


def require_deepspeed() -> None:
    if importlib.util.find_spec("deepspeed") is not None:
        return
    msg = "deepspeed not installed: pip install -e '.[deepspeed]' (DS_BUILD_OPS=0)"
    if os.environ.get("PHALANX_REQUIRE_CLUSTER") or os.environ.get("PHALANX_REQUIRE_DEEPSPEED"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def ds_job(tmp_path: Path, zero: int, out: Path) -> Path:
    doc = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": f"ds-zero{zero}"},
           "spec": {"image": "x", "framework": "deepspeed", "nodes": 1, "procsPerNode": 2,
                    "command": TORCHRUN, "args": ["--nproc-per-node=$(PET_NPROC_PER_NODE)", str(SCRIPT)],
                    "parallelism": {"zero": zero},
                    "training": {"globalBatchSize": GLOBAL_BATCH, "microBatchSize": MICRO, "gradClip": CLIP},
                    "env": [{"name": "OUT_DIR", "value": str(out)}, {"name": "STEPS", "value": str(STEPS)},
                            {"name": "LR", "value": str(LR)}]}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_deepspeed_zero_through_phalanx_local_matches_reference(tmp_path, zero):
    require_deepspeed()
    sys.path.insert(0, str(HERE))
    try:
        from deepspeed_user_script import reference
    finally:
        sys.path.remove(str(HERE))
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "phalanx", "local", str(ds_job(tmp_path, zero, out)), "--json"],
                       capture_output=True, text=True, timeout=240)
    seconds = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-4000:]
    assert json.loads(p.stdout.strip().splitlines()[-1])["exit_codes"] == [0]
    got = json.loads((out / "losses.json").read_text())
    # The rendered config reached the script: 2 ranks × micro 2 × accumulation 2 = 8; the ZeRO stage.
    assert (got["world"], got["micro"], got["accumulation"], got["zero"]) == (2, MICRO, 2, zero)
    assert got["config"]["zero_optimization"]["stage"] == zero and got["config"]["gradient_clipping"] == CLIP
    ref = reference(STEPS, GLOBAL_BATCH, MICRO, LR, CLIP)
    assert len(got["losses"]) == STEPS
    worst = max(abs(a - b) / abs(b) for a, b in zip(got["losses"], ref, strict=True))
    print(f"\nDeepSpeed ZeRO-{zero}, 2 processes: {seconds:.1f}s, max relative loss deviation {worst:.1e}")
    assert worst < 1e-5, (got["losses"], ref)
    assert ref[-1] < ref[0]  # it trains


BUILTIN_TRAINING = {"steps": 5}  # runtime_parity_util.job's training: global 8, micro 2, warmup + cosine, clip 1


@pytest.fixture(scope="module")
def builtin_zero3_losses(tmp_path_factory) -> list[float]:
    """The built-in runtime's ZeRO-3 (FSDP2), 2 processes, debug transformer: the reference."""
    require_deepspeed()
    from phalanx.local.run import run_local

    path = tmp_path_factory.mktemp("builtin") / "job.yaml"
    path.write_text(yaml.safe_dump(job({"zero": 3}, world=2, training=BUILTIN_TRAINING)))
    return run_local(str(path))["losses"]


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_deepspeed_zero_matches_builtin_runtime_zero(tmp_path, zero, builtin_zero3_losses):
    out = tmp_path / "out"
    out.mkdir()
    builtin = job({"zero": zero}, world=2, training=BUILTIN_TRAINING)["spec"]
    spec = {**builtin, "framework": "deepspeed", "command": TORCHRUN,
            "args": ["--nproc-per-node=$(PET_NPROC_PER_NODE)", str(SCRIPT)],
            "env": [{"name": "OUT_DIR", "value": str(out)}, {"name": "MODEL", "value": "builtin"},
                    {"name": "MODEL_OVERRIDES", "value": json.dumps(TINY_OVERRIDES)}]}
    del spec["model"]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
                                    "metadata": {"name": f"ds-builtin-zero{zero}"}, "spec": spec}))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "phalanx", "local", str(path), "--json"],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-4000:]
    got = json.loads((out / "losses.json").read_text())
    assert (got["world"], got["accumulation"], got["zero"]) == (2, 2, zero)
    worst = max_rel(got["losses"], builtin_zero3_losses)
    print(f"\nDeepSpeed ZeRO-{zero} vs built-in ZeRO-3, debug transformer, 2 processes: "
          f"{time.monotonic() - t0:.1f}s, max relative loss deviation {worst:.1e}")
    assert worst < 1e-5, (got["losses"], builtin_zero3_losses)
