"""Parameter-server mode (``spec.parallelism.parameterServer``, phalanx_runtime.ps) in real
processes: torch.distributed.rpc (TensorPipe) on CPU, the 4-layer dim-32 debug transformer whose
token embedding is row-sharded over the servers (untied: ``tieEmbeddings`` false).

* sync, 1 server + 2 workers: the same losses as one process on the same global batch (rtol 1e-5,
  like test_runtime_parity) and step-1 gradient norm; 2 servers + 2 workers likewise.
* async, staleness 1, 30 steps: the mean loss of the last 5 steps is 0.3 below the first 5's, and no pull ran further ahead of the slowest worker than
  the bound.
* checkpoint/resume (sync): the servers' shards (parameters + optimizer state, torch.save per
  server) saved at step 5; a run resumed from it gives the uninterrupted run's losses.
* the servers' optimizer is torch.optim's numerics (SGD, Adam, AdamW) for sparse row pushes.
* async checkpoints (in-process, no RPC): saved when the slowest worker's clock reaches the step.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from runtime_parity_util import job, max_rel

LOSS_RTOL = 1e-5
GNORM1_RTOL = 1e-5


def ps_job(servers: int, workers: int, *, mode: str = "sync", staleness: int = 0, steps: int = 10,
           training: dict | None = None) -> dict:
    par = {"parameterServer": {"servers": servers, "mode": mode, "staleness": staleness}}
    return job(par, world=servers + workers, steps=steps, training=training)


def _result(cfg):
    from phalanx_runtime.train import train

    r = train(cfg)
    return {"losses": r.losses, "grad_norms": r.grad_norms, "step_times": r.step_times, "start_step": r.start_step, **r.extra}


@pytest.fixture(scope="module")
def reference():
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train

    res = train(RuntimeConfig.from_dict(job()))
    return {"losses": res.losses, "grad_norms": res.grad_norms}


@pytest.mark.runtime
@pytest.mark.parametrize("servers", [1, 2])
def test_sync_parity(servers, reference):
    from phalanx_runtime.spawn import run_ranks

    out = run_ranks(ps_job(servers, 2), servers + 2, fn=_result, timeout=180)
    loss_dev = max_rel(out["losses"], reference["losses"])
    g1_dev = abs(out["grad_norms"][0] - reference["grad_norms"][0]) / reference["grad_norms"][0]
    print(f"\nPS sync {servers}+2: loss max rel {loss_dev:.2e} gnorm@1 rel {g1_dev:.2e} "
          f"bytes/step {out['bytes_per_step'][-1]}")
    assert len(out["losses"]) == 10
    assert loss_dev < LOSS_RTOL, (out["losses"], reference["losses"])
    assert g1_dev < GNORM1_RTOL
    assert out["max_staleness"] == 0
    assert out["losses"][-1] < out["losses"][0]


@pytest.mark.runtime
def test_async_staleness_bound_and_convergence():
    from phalanx_runtime.spawn import run_ranks

    steps, bound = 30, 1
    training = {"lr": 1e-2, "lrSchedule": {"warmupSteps": 2, "decay": "constant"}}
    out = run_ranks(ps_job(1, 2, mode="async", staleness=bound, steps=steps, training=training), 3, fn=_result,
                    timeout=180)
    first, last = sum(out["losses"][:5]) / 5, sum(out["losses"][-5:]) / 5
    print(f"\nPS async staleness {bound}: mean loss of the first 5 steps {first:.3f}, of the last 5 {last:.3f}; "
          f"observed staleness per step and worker {out['staleness']}")
    assert len(out["losses"]) == steps
    assert out["max_staleness"] <= bound
    assert last < first - 0.3


@pytest.mark.runtime
def test_checkpoint_resume_matches_uninterrupted(tmp_path, monkeypatch):
    from phalanx_runtime.spawn import run_ranks

    monkeypatch.setenv("PHALANX_CHECKPOINT_DIR", str(tmp_path))
    doc = ps_job(1, 2)
    doc["spec"]["checkpoint"] = {"intervalSteps": 5, "keepLast": 3}
    full = run_ranks(doc, 3, fn=_result, timeout=180)
    ps_dir = tmp_path / "ps"
    assert sorted(p.name for p in ps_dir.iterdir()) == ["step-00000005", "step-00000010"]
    assert (ps_dir / "step-00000005" / "server-0-of-1.pt").exists()
    shutil.rmtree(ps_dir / "step-00000010")  # as if the run had stopped after step 5
    resumed = run_ranks(doc, 3, fn=_result, timeout=180)
    assert full["start_step"] == 0 and resumed["start_step"] == 5
    assert resumed["losses"] == full["losses"][5:]


@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_server_optimizer_matches_torch_on_sparse_rows(kind):
    """Row pushes scattered into a dense gradient, then torch.optim on the shard: the same
    parameters as torch.optim on the dense table (rows that got no gradient included)."""
    from phalanx_runtime.ps.optim import OptimConfig, apply_step, build_server_optimizer

    torch.manual_seed(0)
    table = torch.randn(10, 4)
    cfg = OptimConfig(kind=kind, lr=0.1, weight_decay=0.01 if kind != "adam" else 0.0, momentum=0.9)
    shard = table.clone()
    ref = torch.nn.Parameter(table.clone())
    ref_opt = {"sgd": lambda: torch.optim.SGD([ref], lr=0.1, momentum=0.9, weight_decay=0.01),
               "adam": lambda: torch.optim.Adam([ref], lr=0.1, betas=cfg.betas),
               "adamw": lambda: torch.optim.AdamW([ref], lr=0.1, betas=cfg.betas, weight_decay=0.01)}[kind]()
    opt = build_server_optimizer([shard], cfg)
    for step in range(1, 4):
        ids, vals = torch.tensor([1, 7, 1]), torch.randn(3, 4)
        shard.grad = torch.zeros_like(shard).index_add_(0, ids, vals)
        apply_step(opt, cfg, step)
        ref.grad = torch.zeros(10, 4).index_add_(0, ids, vals)  # what a dense table gets
        ref_opt.step()
        ref_opt.zero_grad()
    torch.testing.assert_close(shard, ref.detach(), rtol=1e-6, atol=1e-7)


def test_async_server_saves_when_the_slowest_worker_passes_a_checkpoint_step(tmp_path):
    """In-process (no RPC): async pushes apply at once; the shard is saved when min(clocks)
    reaches a checkpoint step, and a new server resumes from it (parameters, optimizer, clocks)."""
    from phalanx_runtime.ps.optim import OptimConfig
    from phalanx_runtime.ps.server import ShardServer
    from phalanx_runtime.ps.shardckpt import ShardCheckpoint
    from phalanx_runtime.ps.sharding import make_plan

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3))
    plan = make_plan(model, 1)
    assert plan.row_sharded == {"0.weight": 10} and set(plan.dense_owner) == {"1.weight", "1.bias"}
    ckpt = ShardCheckpoint(tmp_path / "ps", 0, 1, interval=2, keep_last=2, total_steps=10)

    def server():
        return ShardServer(0, plan, model, OptimConfig(lr=0.1), workers=2, mode="async", staleness=1, ckpt=ckpt)

    s = server()
    dense = {"1.weight": torch.ones(3, 4), "1.bias": torch.ones(3)}
    rows = {"0.weight": (torch.tensor([2, 5]), torch.ones(2, 4))}
    for step, worker in ((1, 0), (2, 0), (1, 1)):
        s.push(worker, step, dense, rows)
    assert ckpt.steps() == [] and s.clock == [2, 1]
    s.push(1, 2, dense, rows)  # the slowest worker reaches step 2
    assert ckpt.steps() == [2]
    resumed = server()
    assert resumed.start_step == 2 and resumed.clock == [2, 2]
    for name, t in s.params.items():
        torch.testing.assert_close(resumed.params[name], t, rtol=0, atol=0)


class _Payload:
    """What a hostile pod could pickle into a shard on the shared volume."""

    def __reduce__(self):
        return (print, ("code ran",))


def test_a_crafted_shard_is_refused_not_run(tmp_path):
    import torch

    from phalanx_runtime.ps.shardckpt import ShardCheckpoint

    ck = ShardCheckpoint(tmp_path / "ps", 0, 1, 1, 2, 10)
    ck.save(1, {"params": {"w": torch.ones(2)}})
    assert ck.load_latest()["step"] == 1  # tensors, numbers, dicts load
    torch.save({"params": _Payload(), "step": 2}, ck.path(1))
    with pytest.raises(Exception, match="[Ww]eights only load failed|Unsupported"):
        ck.load_latest()
