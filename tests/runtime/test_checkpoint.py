"""Checkpoints in real worker processes (gloo, tiny transformer): kill a rank and resume, kill
during a checkpoint write, resume 4 ranks into 2 and 3 (DDP → FSDP), SIGTERM, keep-last pruning,
async == sync. Workers are ``python -m phalanx_runtime.train`` processes (bench/chaos_harness.py)."""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import pytest
import torch

from bench.chaos_harness import Workers, ckpt_job, run

pytestmark = pytest.mark.runtime

STEPS, INTERVAL = 12, 2
TOL = 1e-5


def committed(d: Path) -> list[int]:
    from phalanx_runtime.components.checkpoint import committed_steps

    return sorted(committed_steps(d))


def read_ckpt(path: Path) -> dict:
    """A committed DCP checkpoint as one flat dict of full tensors / objects (no process group)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    sd: dict = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(str(path)), planner=_EmptyStateDictLoadPlanner(),
                     no_dist=True)
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    return flatten_state_dict(sd)[0]


def same(a, b) -> bool:
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
    return a == b


def wait_for(pred, timeout=120.0, every=0.02):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise TimeoutError("condition not met")


def assert_resumed_like(res: dict, ref: list[float], start: int):
    assert res["start_step"] == start
    got = res["losses"]
    assert len(got) == STEPS - start
    dev = max(abs(a - b) / abs(b) for a, b in zip(got, ref[start:], strict=True))
    assert dev <= TOL, (got, ref[start:])
    return dev


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted runs, sync and async: the loss trajectory every resume must match; (e) pruning
    and (f) async == sync checked on them."""
    base = tmp_path_factory.mktemp("ref")
    out = {}
    for mode in ("sync", "async"):
        doc = ckpt_job(world=2, steps=STEPS, interval=INTERVAL, keep_last=2, async_save=mode == "async")
        # Async: writes slowed by 0.3 s, so training mutates the parameters while the previous
        # checkpoint is being written (a staged copy must be what is written).
        env = {"PHALANX_CHECKPOINT_TEST_WRITE_DELAY": "0.3"} if mode == "async" else None
        codes, res = run(doc, base / mode, base / f"work-{mode}", env=env)
        assert codes == [0, 0], (base / f"work-{mode}")
        out[mode] = res
    out["dir"] = base
    return out


def test_keep_last_pruning(reference):
    """(e) keepLast 2, interval 2, 12 steps: only the two newest committed checkpoints remain, and no
    uncommitted directory is left behind."""
    for mode in ("sync", "async"):
        d = reference["dir"] / mode
        assert committed(d) == [10, 12]
        assert not list(d.glob(".tmp-*")) and not list(d.glob(".old-*"))
        assert reference[mode]["last_checkpoint"]["step"] == 12
        assert len(reference[mode]["checkpoint_stall_s"]) == STEPS // INTERVAL


def test_async_and_sync_checkpoints_identical(reference):
    """(f) Async saves (own gloo group, staged copy) write the same bytes of state as sync saves,
    and training is not perturbed."""
    assert reference["async"]["losses"] == reference["sync"]["losses"]
    for step in (10, 12):
        a = read_ckpt(reference["dir"] / "async" / f"step-{step}")
        s = read_ckpt(reference["dir"] / "sync" / f"step-{step}")
        assert a.keys() == s.keys()
        bad = [k for k in a if not same(a[k], s[k])]
        assert not bad, bad[:5]
        assert a["trainer.step"] == step


def test_sigkill_rank_then_resume_matches_uninterrupted(reference, tmp_path):
    """(a) SIGKILL one worker mid-run; the others are torn down; a new run resumes at the last
    committed checkpoint and its losses equal the uninterrupted run's."""
    d = tmp_path / "ckpt"
    doc = ckpt_job(world=2, steps=STEPS, interval=INTERVAL)
    # A slower checkpoint write (0.3 s) paces the run so the kill lands mid-run.
    w = Workers(doc, d, tmp_path, env={"PHALANX_CHECKPOINT_TEST_WRITE_DELAY": "0.3"}, tag="killed")
    wait_for(lambda: 4 in committed(d))
    w.kill(1, signal.SIGKILL)
    codes = w.wait(120)
    assert codes[1] == -signal.SIGKILL and codes[0] != 0
    last = max(committed(d))
    assert 4 <= last < STEPS
    codes, res = run(doc, d, tmp_path, tag="resumed")
    assert codes == [0, 0]
    dev = assert_resumed_like(res, reference["sync"]["losses"], last)
    print(f"\nRESUME after SIGKILL: from step {last}, max rel loss deviation {dev:.1e}")


def test_kill_during_checkpoint_write_keeps_previous(reference, tmp_path):
    """(b) SIGKILL a rank while step 4 is being written: step-4 is never committed, step 2 loads.
    Damaged committed checkpoints (no metadata, truncated shard) are skipped on resume."""
    d = tmp_path / "ckpt"
    doc = ckpt_job(world=2, steps=STEPS, interval=INTERVAL)
    w = Workers(doc, d, tmp_path, env={"PHALANX_CHECKPOINT_TEST_WRITE_DELAY": "2"}, tag="killed")
    # Shards of step 4 on disk, metadata not yet: mid-write.
    wait_for(lambda: list((d / ".tmp-step-4").glob("*.distcp")) if (d / ".tmp-step-4").exists() else None)
    w.kill(1, signal.SIGKILL)
    w.wait(120)
    assert committed(d) == [2]
    assert (d / ".tmp-step-4").exists()
    # Damage: a "committed" step 6 whose metadata is gone and a step 8 with a truncated shard.
    for step in (6, 8):
        shutil.copytree(d / "step-2", d / f"step-{step}")
        (d / f"step-{step}" / "COMMITTED").write_text(json.dumps({"step": step, "world_size": 2}))
    (d / "step-6" / ".metadata").unlink()
    shard = sorted((d / "step-8").glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    from phalanx_runtime.components.checkpoint import latest_valid, validate_checkpoint

    assert "metadata" in validate_checkpoint(d / "step-6")
    assert "truncated" in validate_checkpoint(d / "step-8")
    assert latest_valid(d)[0] == 2
    codes, res = run(doc, d, tmp_path, tag="resumed")
    assert codes == [0, 0]
    assert_resumed_like(res, reference["sync"]["losses"], 2)
    assert not (d / ".tmp-step-4").exists()
    assert max(committed(d)) == STEPS


def test_sigterm_saves_and_exits_143(reference, tmp_path):
    """(d) SIGTERM to every worker (pod deletion / preemption): all ranks agree on the next step
    boundary, save a checkpoint synchronously and exit 143; the next run resumes exactly there."""
    from phalanx_runtime.components.checkpoint import validate_checkpoint
    from phalanx_runtime.lifetime import EXIT_PREEMPTED

    d = tmp_path / "ckpt"
    doc = ckpt_job(world=2, steps=STEPS, interval=0)  # interval 0: only at the end (or on SIGTERM)
    w = Workers(doc, d, tmp_path, env={"PHALANX_CHECKPOINT_TEST_WRITE_DELAY": "0.2"}, tag="term")
    wait_for(lambda: "step 3/" in (tmp_path / "term-rank0.log").read_text())
    w.signal_all(signal.SIGTERM)
    codes = w.wait(120)
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED]
    res = w.result()
    stopped = res["start_step"] + len(res["losses"])
    assert res["preempted"] and 3 <= stopped < STEPS
    assert committed(d) == [stopped] and validate_checkpoint(d / f"step-{stopped}") is None
    assert res["last_checkpoint"]["step"] == stopped
    codes, res = run(doc, d, tmp_path, tag="resumed")
    assert codes == [0, 0]
    assert_resumed_like(res, reference["sync"]["losses"], stopped)


@pytest.mark.parametrize("world,zero", [(2, 3), (3, 2)])
def test_resume_at_other_world_size_and_layout(tmp_path_factory, world, zero):
    """(c) A 4-rank DDP checkpoint resumes into 2 ranks FSDP (zero 3) and 3 ranks FSDP (zero 2,
    uneven shards): full model and optimizer state, scheduler and data position are identical."""
    base = tmp_path_factory.getbasetemp() / "reshard"
    kw = {"training": {"globalBatchSize": 12, "microBatchSize": 1}}
    d, truth = base / "ckpt", base / "full4.pt"
    if not truth.exists():
        doc = ckpt_job(world=4, steps=3, interval=3, zero=0, **kw)
        codes, _ = run(doc, d, base, env={"PHALANX_DEBUG_FULL_STATE": str(truth)}, tag="save4")
        assert codes == [0] * 4
    out = base / f"full{world}.pt"
    doc = ckpt_job(world=world, steps=3, interval=3, zero=zero, **kw)
    codes, res = run(doc, d, base, env={"PHALANX_DEBUG_FULL_STATE": str(out)}, tag=f"load{world}")
    assert codes == [0] * world and res["start_step"] == 3
    a, b = torch.load(truth, weights_only=False), torch.load(out, weights_only=False)
    for part in ("model", "optim"):
        assert a[part].keys() == b[part].keys()
        bad = [k for k in a[part] if not same(a[part][k], b[part][k])]
        assert not bad, (part, bad[:5])
    assert a["loader"] == b["loader"] and a["scheduler"]["last_epoch"] == b["scheduler"]["last_epoch"]


def test_export_consolidated(tmp_path):
    """exportConsolidated: final/model.pt holds the single-process model's keys and full tensors."""
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.models.transformer import build_transformer

    d = tmp_path / "ckpt"
    doc = ckpt_job(world=2, steps=2, interval=0, zero=3, export=True)
    codes, res = run(doc, d, tmp_path)
    assert codes == [0, 0]
    sd = torch.load(d / "final" / "model.pt", weights_only=True)
    ref = build_transformer(RuntimeConfig.from_dict(doc).shape, seed=7, device="cpu").state_dict()
    assert sd.keys() == ref.keys()
    assert all(sd[k].shape == ref[k].shape for k in ref)
    assert any(not torch.equal(sd[k], ref[k]) for k in ref)  # trained, not the init


def test_launcher_forwards_sigterm(tmp_path):
    """(d) through ``phalanx-runtime`` (torchrun agent): SIGTERM to the launcher reaches the workers,
    they checkpoint, and the launcher exits 143."""
    import os
    import subprocess
    import sys

    from phalanx_runtime.components.checkpoint import latest_valid
    from phalanx_runtime.lifetime import EXIT_PREEMPTED

    cfg, d, log = tmp_path / "c.json", tmp_path / "ckpt", tmp_path / "launch.log"
    cfg.write_text(json.dumps(ckpt_job(world=2, steps=500, interval=0)))
    env = dict(os.environ, PHALANX_CHECKPOINT_DIR=str(d), OMP_NUM_THREADS="1")
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, "-m", "phalanx_runtime.launch", "--config", str(cfg)], env=env,
                             stdout=f, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: "step 3/" in log.read_text())
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=120) == EXIT_PREEMPTED
        finally:
            if p.poll() is None:
                p.kill()
    step, _ = latest_valid(d)
    assert 3 <= step < 500


def test_single_process_in_process_and_status_shape(tmp_path, monkeypatch):
    """One process, ``train()`` in-process: checkpoints on, resume at the end step is a no-op, and
    ``lastCheckpoint`` has the shape the operator's status expects ({step, path, time})."""
    from phalanx.api.types import CheckpointStatus
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train

    monkeypatch.setenv("PHALANX_CHECKPOINT_DIR", str(tmp_path))
    final = tmp_path / "termination-log"
    final.touch()  # as the kubelet's, which the runtime only writes into
    monkeypatch.setenv("PHALANX_TERMINATION_LOG", str(final))
    cfg = RuntimeConfig.from_dict(ckpt_job(world=1, steps=4, interval=2, async_save=True))
    r = train(cfg)
    assert committed(tmp_path) == [2, 4] and r.start_step == 0
    st = CheckpointStatus.model_validate(r.last_checkpoint)
    assert st.step == 4 and st.path == str(tmp_path / "step-4") and st.time
    assert "resumedStep" not in json.loads(final.read_text()), "a fresh start resumed nothing"
    again = train(cfg)
    assert again.start_step == 4 and again.losses == []
    # the progress record (status.resumedStep) says where a start resumed, however it was restarted
    assert json.loads(final.read_text())["resumedStep"] == 4
