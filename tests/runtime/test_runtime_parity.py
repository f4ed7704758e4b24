"""Loss and gradient-norm parity of every parallel layout against the single-process run.

Real processes (torch.multiprocessing spawn, gloo on CPU), a 4-layer dim-32 transformer, 10
steps with gradient clipping and a warmup+cosine LR. Tolerances (fp32): every step's loss within
rtol 1e-5 and step 1's gradient norm within rtol 1e-5 of the reference; the grad norm of every
step within 1e-4 (differences in reduction order compound through Adam).
"""

from __future__ import annotations

import pytest
from runtime_parity_util import job, max_rel

LOSS_RTOL = 1e-5
GNORM1_RTOL = 1e-5
GNORM_RTOL = 1e-4

LAYOUTS = {
    # id: (world, parallelism)
    "ddp": (2, {"zero": 0}),
    "zero1": (2, {"zero": 1}),
    "zero2": (2, {"zero": 2}),
    "zero3": (2, {"zero": 3}),
    "hsdp": (4, {"zero": 3, "replicate": 2}),
    "tp": (2, {"tensor": 2}),
    "tp_sp": (2, {"tensor": 2, "sequenceParallel": True}),
    "pp_gpipe": (2, {"pipeline": 2, "pipelineSchedule": "GPipe", "microbatches": 4}),
    "pp_1f1b": (2, {"pipeline": 2, "pipelineSchedule": "1F1B", "microbatches": 4}),
    "pp_interleaved": (2, {"pipeline": 2, "pipelineSchedule": "Interleaved1F1B", "virtualStages": 2, "microbatches": 4}),
    "pp_zbv": (2, {"pipeline": 2, "pipelineSchedule": "ZBVZeroBubble", "virtualStages": 2, "microbatches": 4}),
    "fsdp_tp": (4, {"zero": 3, "tensor": 2, "sequenceParallel": True}),
    "pp_dp": (4, {"pipeline": 2, "zero": 0, "pipelineSchedule": "1F1B", "microbatches": 2}),
    "pp_fsdp_tp": (8, {"pipeline": 2, "zero": 3, "tensor": 2, "sequenceParallel": True,
                       "pipelineSchedule": "1F1B", "microbatches": 2}),
}


@pytest.fixture(scope="module")
def reference():
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train

    res = train(RuntimeConfig.from_dict(job()))
    return {"losses": res.losses, "grad_norms": res.grad_norms}


@pytest.mark.runtime
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_parity(name, reference):
    from phalanx_runtime.spawn import run_ranks

    world, par = LAYOUTS[name]
    out = run_ranks(job(par, world=world), world)
    assert out["world_size"] == world
    assert len(out["losses"]) == 10
    loss_dev = max_rel(out["losses"], reference["losses"])
    g1_dev = abs(out["grad_norms"][0] - reference["grad_norms"][0]) / reference["grad_norms"][0]
    g_dev = max_rel(out["grad_norms"], reference["grad_norms"])
    print(f"\nPARITY {name}: world {world} loss max rel {loss_dev:.2e} gnorm@1 rel {g1_dev:.2e} gnorm max rel {g_dev:.2e}")
    assert loss_dev < LOSS_RTOL, (out["losses"], reference["losses"])
    assert g1_dev < GNORM1_RTOL, (out["grad_norms"], reference["grad_norms"])
    assert g_dev < GNORM_RTOL
    # Training actually moved.
    assert out["losses"][-1] < out["losses"][0]
