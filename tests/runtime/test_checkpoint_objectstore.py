"""Checkpoints in object storage, on a real S3 server (SeaweedFS, hack/seaweedfs/build.sh, run by
localcluster/seaweedfs.py) and real worker processes (gloo, tiny transformer), with no shared
volume: every rank reads and writes the bucket through ``$PHALANX_CHECKPOINT_URI`` and the env a pod
gets (endpoint, keys). A killed run resumes with the losses of an uninterrupted one; a rank killed
while a step is being written leaves it uncommitted and the resume takes the step before; keepLast
prunes in the bucket; a 4-rank checkpoint reshards into 2 ranks FSDP from the bucket."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from bench.chaos_harness import Workers, ckpt_job, run
from tests.builds import required
from tests.runtime.test_checkpoint import wait_for

pytestmark = [pytest.mark.runtime, pytest.mark.built_last]  # SeaweedFS: built last by make test

STEPS, INTERVAL = 12, 2
TOL = 1e-5
# tiered: each rank saves to its pod's dir and uploads in the background (the default);
# direct: every rank writes to the bucket (checkpoint.storage.localTier.enabled: false)
MODES = ("tiered", "direct")


def job(mode: str, **kw) -> dict:
    doc = ckpt_job(**kw)
    if mode == "direct":  # the runtime reads localTier from the spec; the bucket comes as the env
        doc["spec"]["checkpoint"]["storage"] = {"uri": "s3://ckpt/spec", "localTier": {"enabled": False}}
    return doc


def restored(work, tag: str, world: int) -> list[tuple[int, int]]:
    """(local, remote) files each rank read at its resume, from its log (tiered only)."""
    import re

    out = []
    for r in range(world):
        m = re.search(r"restored step \d+: (\d+) files from the local tier, (\d+) from", (work / f"{tag}-rank{r}.log").read_text())
        out.append((int(m.group(1)), int(m.group(2))) if m else None)
    return out


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    from localcluster import seaweedfs

    try:
        weed_dir = seaweedfs.build()
    except Exception as e:  # noqa: BLE001 — reported as skip or failure
        if required():
            pytest.fail(f"SeaweedFS could not be built (hack/seaweedfs/build.sh): {e}", pytrace=False)
        pytest.skip(f"SeaweedFS not built: {e}")
    server = seaweedfs.LocalS3(tmp_path_factory.mktemp("seaweedfs"), weed_dir).start()
    print(f"\nseaweedfs: S3 at {server.endpoint}, started in {server.started_in:.1f}s")
    server.make_bucket("ckpt")
    yield server
    server.stop()


def prefix(s3, name: str) -> str:
    return f"s3://ckpt/test/{name}-{os.getpid()}-{time.monotonic_ns()}"


def env(s3, uri: str, **extra) -> dict:
    return {**s3.env(), "PHALANX_CHECKPOINT_URI": uri, **extra}


def committed(s3, uri: str) -> list[int]:
    from phalanx_runtime.components.objectstore import ObjectStore

    old = {k: os.environ.get(k) for k in s3.env()}
    os.environ.update(s3.env())
    try:
        return sorted(ObjectStore(uri).committed_steps())
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def keys(s3, uri: str) -> list[str]:
    base = uri.removeprefix("s3://")
    return sorted(k.removeprefix(base + "/") for k in s3.fs().find(base))


@pytest.fixture(scope="module")
def reference(s3, tmp_path_factory):
    """One uninterrupted 2-rank run with its checkpoints in the bucket: the losses a resume must match."""
    work = tmp_path_factory.mktemp("ref")
    uri = prefix(s3, "ref")
    doc = ckpt_job(world=2, steps=STEPS, interval=INTERVAL, keep_last=2)
    codes, res = run(doc, work / "local", work, env=env(s3, uri))
    assert codes == [0, 0], (work / "run-rank0.log").read_text()[-3000:]
    return {"uri": uri, **res}


def test_an_uninterrupted_run_commits_in_the_bucket_and_prunes_there(s3, reference):
    uri = reference["uri"]
    assert committed(s3, uri) == [10, 12]
    assert reference["last_checkpoint"] == {**reference["last_checkpoint"], "step": 12, "path": f"{uri}/step-12"}
    names = keys(s3, uri)
    assert {"step-12/COMMITTED", "step-12/.metadata", "step-12/rng/rank-0.pt", "step-12/rng/rank-1.pt"} <= set(names)
    assert not [n for n in names if not n.startswith(("step-10/", "step-12/", "model/")) and n != "metrics.jsonl"], names
    assert not [n for n in names if "/.uploaded/" in n], names  # the local tier's upload marks go at the commit


@pytest.mark.parametrize("mode", MODES)
def test_killed_run_resumes_from_the_bucket_with_equal_losses(s3, reference, tmp_path, mode):
    """A new gang on new pods: nothing local carries over, every file comes from the bucket."""
    uri = prefix(s3, "killed")
    doc = job(mode, world=2, steps=STEPS, interval=INTERVAL)
    w = Workers(doc, tmp_path / "local", tmp_path, env=env(s3, uri, PHALANX_CHECKPOINT_TEST_WRITE_DELAY="0.3"), tag="killed")
    wait_for(lambda: 4 in committed(s3, uri), 180)
    w.kill(1, signal.SIGKILL)
    codes = w.wait(120)
    assert codes[1] == -signal.SIGKILL and codes[0] != 0
    last = max(committed(s3, uri))
    assert 4 <= last < STEPS
    # a fresh local directory: nothing but the bucket carries the state over
    codes, res = run(doc, tmp_path / "local-2", tmp_path, env=env(s3, uri), tag="resumed")
    assert codes == [0, 0], (tmp_path / "resumed-rank0.log").read_text()[-3000:]
    assert res["start_step"] == last
    got, ref = res["losses"], reference["losses"][last:]
    assert len(got) == len(ref) and max(abs(a - b) / abs(b) for a, b in zip(got, ref, strict=True)) <= TOL, (got, ref)
    if mode == "tiered":
        assert all(local == 0 and remote > 0 for local, remote in restored(tmp_path, "resumed", 2))


def test_a_restart_in_place_reads_the_pods_copy_and_a_replaced_rank_the_bucket(s3, reference, tmp_path):
    """Tiered, killed and restarted with the pods' directory kept (a restart in place: the emptyDir
    outlives the containers): every rank reads its files of the newest committed step locally. Then
    again with rank 1's files gone from it (its node replaced): rank 1 reads from the bucket."""
    uri, local = prefix(s3, "inplace"), tmp_path / "local"
    doc = job("tiered", world=2, steps=STEPS, interval=INTERVAL)
    w = Workers(doc, local, tmp_path, env=env(s3, uri, PHALANX_CHECKPOINT_TEST_WRITE_DELAY="0.3"), tag="killed")
    wait_for(lambda: 4 in committed(s3, uri), 180)
    w.kill(1, signal.SIGKILL)
    w.wait(120)
    last = max(committed(s3, uri))
    w = Workers(doc, local, tmp_path, env=env(s3, uri, PHALANX_CHECKPOINT_TEST_WRITE_DELAY="0.3"), tag="inplace")
    wait_for(lambda: all(r is not None for r in restored(tmp_path, "inplace", 2)), 120)
    reads = restored(tmp_path, "inplace", 2)
    assert all(remote == 0 and local > 0 for local, remote in reads), reads
    wait_for(lambda: max(committed(s3, uri)) >= last + 2 * INTERVAL)
    w.kill(0, signal.SIGKILL)
    w.kill(1, signal.SIGKILL)
    w.wait(60)
    newest = max(committed(s3, uri))
    for f in (local / "tier" / f"step-{newest}").rglob("*"):
        if f.is_file() and (f.name.startswith("__1_") or f.name == "rank-1.pt"):
            f.unlink()
    codes, res = run(doc, local, tmp_path, env=env(s3, uri), tag="replaced")
    assert codes == [0, 0] and res["start_step"] == newest
    # rank 1's shard is read from the bucket by every rank that holds part of it (DDP: both, each
    # loading the replicas the other wrote); what the pods kept is still read locally
    reads = restored(tmp_path, "replaced", 2)
    assert all(local > 0 and remote > 0 for local, remote in reads), reads
    got, ref = res["losses"], reference["losses"][newest:]
    assert max(abs(a - b) / abs(b) for a, b in zip(got, ref, strict=True)) <= TOL, (got, ref)


@pytest.mark.parametrize("mode", MODES)
def test_a_step_killed_mid_write_is_never_committed_and_is_cleared(s3, reference, tmp_path, mode):
    uri = prefix(s3, "midwrite")
    doc = job(mode, world=2, steps=STEPS, interval=INTERVAL, async_save=False)
    w = Workers(doc, tmp_path / "local", tmp_path, env=env(s3, uri, PHALANX_CHECKPOINT_TEST_WRITE_DELAY="3"), tag="killed")
    wait_for(lambda: 2 in committed(s3, uri))
    # step 4's shards are in the bucket (each rank sleeps after writing them), its marker is not
    wait_for(lambda: any(n.startswith("step-4/") and n.endswith(".distcp") for n in keys(s3, uri)), 120)
    w.kill(0, signal.SIGKILL)
    w.kill(1, signal.SIGKILL)
    w.wait(60)
    assert committed(s3, uri) == [2]
    codes, res = run(doc, tmp_path / "local-2", tmp_path, env=env(s3, uri), tag="resumed")
    assert codes == [0, 0], (tmp_path / "resumed-rank0.log").read_text()[-3000:]
    assert res["start_step"] == 2
    assert max(abs(a - b) / abs(b) for a, b in zip(res["losses"], reference["losses"][2:], strict=True)) <= TOL


def test_a_damaged_committed_step_is_skipped(s3, reference, tmp_path):
    """A truncated shard object in the newest committed step: the resume takes the one before."""
    uri = prefix(s3, "damaged")
    doc = job("direct", world=2, steps=4, interval=2, keep_last=3)
    codes, _ = run(doc, tmp_path / "local", tmp_path, env=env(s3, uri), tag="first")
    assert codes == [0, 0]
    fs, base = s3.fs(), uri.removeprefix("s3://")
    shard = next(k for k in fs.find(f"{base}/step-4") if k.endswith(".distcp"))
    fs.pipe(shard, fs.cat(shard)[:100])
    longer = job("tiered", world=2, steps=6, interval=2, keep_last=3)
    codes, res = run(longer, tmp_path / "local-2", tmp_path, env=env(s3, uri), tag="second")
    assert codes == [0, 0]
    assert res["start_step"] == 2


def test_a_world_size_change_reshards_from_the_bucket(s3, tmp_path):
    """4 ranks DDP save to the bucket; 2 ranks FSDP (zero 3) load it: full model and optimizer
    state, scheduler and data position identical."""
    uri = prefix(s3, "reshard")
    kw = {"training": {"globalBatchSize": 12, "microBatchSize": 1}}
    truth, out = tmp_path / "full4.pt", tmp_path / "full2.pt"
    codes, _ = run(ckpt_job(world=4, steps=3, interval=3, zero=0, **kw), tmp_path / "l4", tmp_path,
                   env=env(s3, uri, PHALANX_DEBUG_FULL_STATE=str(truth)), tag="save4")
    assert codes == [0] * 4
    codes, res = run(ckpt_job(world=2, steps=3, interval=3, zero=3, **kw), tmp_path / "l2", tmp_path,
                     env=env(s3, uri, PHALANX_DEBUG_FULL_STATE=str(out)), tag="load2")
    assert codes == [0, 0] and res["start_step"] == 3
    a, b = torch.load(truth, weights_only=False), torch.load(out, weights_only=False)
    for part in ("model", "optim"):
        assert a[part].keys() == b[part].keys()
        bad = [k for k in a[part] if not (torch.is_tensor(a[part][k]) and torch.equal(a[part][k], b[part][k])
                                          or a[part][k] == b[part][k])]
        assert not bad, (part, bad[:5])
    assert a["loader"] == b["loader"]


# ---------------------------------------------------------------- the tools take the URI


@pytest.fixture(scope="module")
def trained_both(s3, tmp_path_factory):
    """One preset model trained 3 steps in this process twice, into a directory and into the
    bucket: the same checkpoint, two places."""
    from phalanx_common.contract import ENV_CHECKPOINT_DIR, ENV_CHECKPOINT_URI, ENV_TERMINATION_LOG
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train
    from tests.runtime.test_hf_export import export_job

    base, uri = tmp_path_factory.mktemp("trained"), prefix(s3, "trained")
    for target in ("dir", "bucket"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ENV_CHECKPOINT_DIR, str(base / target))
            mp.setenv(ENV_TERMINATION_LOG, str(base / f"termination-{target}"))
            if target == "bucket":
                for k, v in s3.env().items():
                    mp.setenv(k, v)
                mp.setenv(ENV_CHECKPOINT_URI, uri)
            train(RuntimeConfig.from_dict(export_job()))
    return base / "dir", uri


def test_export_reads_and_writes_the_bucket_as_a_directory(s3, trained_both, tmp_path, monkeypatch):
    """`phalanx export s3://…`: the same Hugging Face files as from the directory; `--out s3://…`
    uploads them, and transformers loads the download."""
    from phalanx.cli import main
    from tests.runtime.test_hf_export import RUNTIME_PYTHONPATH, safetensor_files

    directory, uri = trained_both
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PYTHONPATH", RUNTIME_PYTHONPATH)
    assert main(["export", str(directory), "--out", str(tmp_path / "from-dir")]) == 0
    assert main(["export", uri, "--out", str(tmp_path / "from-bucket")]) == 0
    assert safetensor_files(tmp_path / "from-bucket") == safetensor_files(tmp_path / "from-dir")
    out_uri = f"{uri}-export"
    assert main(["export", f"{uri}/step-3", "--out", out_uri]) == 0
    fs, down = s3.fs(), tmp_path / "downloaded"
    fs.get(out_uri.removeprefix("s3://") + "/", str(down) + "/", recursive=True)
    assert safetensor_files(down) == safetensor_files(tmp_path / "from-dir")
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(down) is not None
    assert main(["export", uri, "--out", out_uri]) == 1  # not over an earlier export


def test_plot_reads_the_log_rank_0_keeps_in_the_bucket(s3, trained_both, tmp_path, monkeypatch):
    from phalanx.cli import main

    _, uri = trained_both
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    assert "metrics.jsonl" in keys(s3, uri)
    assert main(["plot", uri, "-o", str(tmp_path / "loss.png")]) == 0
    assert (tmp_path / "loss.png").stat().st_size > 0


def test_phalanx_local_keeps_its_checkpoints_in_the_bucket(s3, tmp_path, monkeypatch):
    """`phalanx local --checkpoint-dir s3://…`: the run commits there, and a rerun resumes from it."""
    import yaml

    from phalanx.local.run import run_local

    uri = prefix(s3, "local")
    doc = ckpt_job(world=2, steps=4, interval=2)
    doc["metadata"] = {"name": "local-s3"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    first = run_local(str(path), checkpoint_dir=uri, timeout=300)
    assert committed(s3, uri) == [2, 4] and first["steps"] == 4
    doc["spec"]["training"]["steps"] = 6
    path.write_text(yaml.safe_dump(doc))
    run_local(str(path), checkpoint_dir=uri, timeout=300)
    assert committed(s3, uri)[-1] == 6
    # the log in the bucket goes on: steps 1-4 from the first run, 5-6 resumed from step 4's checkpoint
    from phalanx.plot import read_curves

    curves = read_curves(uri)
    assert [r["step"] for r in curves.records] == [1, 2, 3, 4, 5, 6] and curves.resumes == []
