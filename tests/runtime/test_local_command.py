"""`phalanx local` runs command jobs (try a script before submitting it): the user's own
torchrun script on 2 nodes × 2 processes gets the env the operator gives the pods (one process per
node-rank, each with its NODE_RANK; torchrun spawns the workers), ``$(VAR)`` references in
command/args expanded as the kubelet does, and none of the built-in runtime's layout or batch rules.
A failing node stops the others; a stopped command job leaves no process behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from phalanx_runtime import lifetime

pytestmark = pytest.mark.runtime

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "runtime_allreduce_script.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # what `torchrun` runs


def command_job(tmp_path: Path, command: list[str], args: list[str], env: dict[str, str], *,
                nodes: int = 2, procs: int = 2) -> Path:
    doc = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "mine"},
           "spec": {"image": "x", "nodes": nodes, "procsPerNode": procs, "command": command, "args": args,
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    # The built-in runtime would refuse these (batch 3 over 4 ranks; DDP with tensor 2).
                    "parallelism": {"tensor": 2}, "training": {"globalBatchSize": 3}}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def phalanx_local(job: Path, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "phalanx", "local", str(job), *extra], capture_output=True,
                          text=True, timeout=timeout)


def test_expand_refs_like_the_kubelet():
    from phalanx.local.env import expand_refs

    env = {"A": "1", "B.x": "2"}
    assert expand_refs("$(A)-$(B.x)-$(C)-$$(A)-$$-$", env) == "1-2-$(C)-$(A)-$-$"


def test_torchrun_command_job_gets_the_pods_env(tmp_path):
    from phalanx.api.types import TrainingJob
    from phalanx.render.pod import rendezvous_env

    out = tmp_path / "out"
    out.mkdir()
    job = command_job(tmp_path, TORCHRUN, ["--nproc-per-node=$(PET_NPROC_PER_NODE)", str(SCRIPT), "--tag",
                                           "$(GREETING)-$(PHALANX_JOB_NAME)", "$$(KEPT)"],
                      {"OUT_DIR": str(out), "GREETING": "hi", "GREETING_TWICE": "$(GREETING)$(GREETING)"})
    t0 = time.monotonic()
    p = phalanx_local(job, "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["mode"] == "command" and summary["exit_codes"] == [0, 0] and summary["world_size"] == 4

    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(4)]
    assert all(r["world"] == 4 and r["sum"] == 1 + 2 + 3 + 4 for r in ranks)
    assert all(r["argv"] == ["--tag", "hi-mine", "$(KEPT)"] for r in ranks)
    # One process per node-rank: two ranks see NODE_RANK 0, two see 1; torchrun made the workers.
    assert sorted(r["env"]["NODE_RANK"] for r in ranks) == ["0", "0", "1", "1"]
    tj = TrainingJob.model_validate(yaml.safe_load(job.read_text()))
    for r in ranks:
        env, node = r["env"], int(r["env"]["NODE_RANK"])
        rendered = {e["name"]: e.get("value") for e in rendezvous_env(tj, node, 0, 29500)}
        local_only = {"PHALANX_METRICS_PORT", "PHALANX_PROGRESS_PORT"}  # one per pod; the nodes share a host here
        assert set(rendered) - local_only <= set(env), set(rendered) - set(env)
        for name in ("NNODES", "NPROC_PER_NODE", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE",
                     "PET_RDZV_ID", "PHALANX_JOB_NAME", "PHALANX_NAMESPACE"):
            assert env[name] == rendered[name], name
        assert env["PET_RDZV_ENDPOINT"].startswith("127.0.0.1:") and env["PHALANX_POD_NAME"] == f"mine-node-{node}-0"
        assert Path(env["PHALANX_CONFIG"]).name == "config.json" and env["PHALANX_CHECKPOINT_DIR"]
        assert env["OUT_DIR"] == str(out) and env["GREETING_TWICE"] == "hihi"
    print(f"\ncommand job, 2 nodes × 2 processes: {time.monotonic() - t0:.1f}s")


def test_failing_node_stops_the_others(tmp_path):
    """Node 1 exits 3 at once; node 0 would sleep for minutes: `phalanx local` stops it, exits 1."""
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\n"
                      "sys.exit(3) if os.environ['NODE_RANK'] == '1' else time.sleep(600)\n")
    job = command_job(tmp_path, [sys.executable, str(script)], [], {}, procs=1)
    t0 = time.monotonic()
    p = phalanx_local(job, timeout=60)
    assert p.returncode == 1 and "node 1 exited with code 3" in p.stderr, p.stderr
    assert time.monotonic() - t0 < 20


def test_stopped_command_job_leaves_no_process(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    job = command_job(tmp_path, TORCHRUN, ["--nproc-per-node=2", str(SCRIPT)],
                      {"OUT_DIR": str(out), "SLEEP_AFTER": "600"})
    with (tmp_path / "local.log").open("w") as log:
        p = subprocess.Popen([sys.executable, "-m", "phalanx", "local", str(job)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("rank-*.json"))) < 4:
            assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "local.log").read_text()[-3000:]
            time.sleep(0.2)
        procs = {(q, lifetime.start_time(q)) for q in lifetime.descendants(p.pid)}
        agents = [q for q, _ in procs if "torch.distributed.run" in lifetime.cmdline(q)]
        workers = [q for q, _ in procs if re.search(r"python\S* -u \S*runtime_allreduce_script", lifetime.cmdline(q))]
        assert (len(agents), len(workers)) == (2, 4), [lifetime.cmdline(q) for q, _ in procs]
        p.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert p.wait(30) == 143
        while any(lifetime.alive(q) and lifetime.start_time(q) == st for q, st in procs):
            assert time.monotonic() - t0 < 20, [lifetime.cmdline(q) for q, _ in procs if lifetime.alive(q)]
            time.sleep(0.1)
    finally:
        lifetime.kill_pids([p.pid, *lifetime.descendants(p.pid)])
        p.wait(10)
    print(f"\nstopped command job: every process gone {time.monotonic() - t0:.1f}s after SIGTERM")
