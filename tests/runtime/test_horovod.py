"""framework: horovod on real processes.

* The launcher (phalanx_runtime.horovod_launch) without Horovod: the wait-for-server loop, the
  pod's processes with their own rank env, a failing process stopping the others, SIGTERM.
* With Horovod 0.28.1 (gloo, no MPI): the pods the operator renders for a 2-node job (and a
  1-node job with procsPerNode 2) run their rendered command — the launcher, then the user's
  Horovod script (horovod_user_script.py) — with the rendered env, the rendezvous address moved to
  127.0.0.1 and a free port. Pod 1 starts first and waits for pod 0's rendezvous server. The
  ranks train with DistributedOptimizer in sync and match one process on the full batch.

Horovod runs from its own cached venv (hack/horovod/venv.sh, docs/horovod.md), never from the
project's Python environment: these tests skip when the venv is missing, unless
``PHALANX_HOROVOD_REQUIRED=1`` (``make test``, ``make test-horovod``): then they build it (a few
minutes, once) or wait for the build under way, and fail rather than skip.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phalanx import constants
from phalanx.api.types import TrainingJob
from phalanx.render.job import render_children
from phalanx_common.net import free_port
from phalanx_runtime.horovod_launch import HorovodPod, Processes, wait_for_server

pytestmark = [pytest.mark.runtime, pytest.mark.built_last]  # make test builds its venv last (hack/test.sh)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "horovod_user_script.py"
STEPS, GLOBAL_BATCH, LR = 8, 16, 0.1
PYTHONPATH = os.pathsep.join(str(ROOT / p) for p in ("operator", "runtime", "common", "."))


def pod_env(nodes: int = 2, procs: int = 1, rank: int = 0, port: int = 1) -> dict[str, str]:
    return {constants.ENV_HOROVOD_RENDEZVOUS_ADDR: "127.0.0.1", constants.ENV_HOROVOD_RENDEZVOUS_PORT: str(port),
            constants.ENV_HOROVOD_HOSTNAME: f"j-node-{rank}", constants.ENV_HOROVOD_CROSS_RANK: str(rank),
            constants.ENV_HOROVOD_CROSS_SIZE: str(nodes), constants.ENV_HOROVOD_LOCAL_SIZE: str(procs),
            constants.ENV_HOROVOD_SIZE: str(nodes * procs), "PYTHONPATH": PYTHONPATH}


# --- the launcher, without Horovod -----------------------------------------------------------

def test_wait_for_server_returns_once_the_port_accepts():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert wait_for_server("127.0.0.1", s.getsockname()[1], 5, interval=0.05) < 5
    with pytest.raises(TimeoutError, match="unreachable after 1s"):
        wait_for_server("127.0.0.1", free_port(), 1, interval=0.1)


def test_each_process_gets_its_rank_and_the_pods_env(tmp_path):
    env = {**os.environ, **pod_env(nodes=3, procs=2, rank=1), "OUT": str(tmp_path)}
    code = ("import os, json; r = os.environ['HOROVOD_RANK']; "
            "json.dump(dict(os.environ), open(os.path.join(os.environ['OUT'], r + '.json'), 'w'))")
    procs = Processes.start([sys.executable, "-c", code], HorovodPod.from_env(env), env)
    assert procs.wait() == 0
    seen = {int(p.stem): json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(seen) == {2, 3}  # node 1 of 3, 2 processes each
    for rank, e in seen.items():
        assert e[constants.ENV_HOROVOD_LOCAL_RANK] == str(rank - 2) and e[constants.ENV_HOROVOD_SIZE] == "6"
        assert e[constants.ENV_HOROVOD_CROSS_RANK] == "1" and e[constants.ENV_HOROVOD_HOSTNAME] == "j-node-1"


def test_a_failing_process_stops_the_others_and_names_the_exit_code(monkeypatch):
    monkeypatch.setenv(constants.ENV_STOP_GRACE_SECONDS, "5")
    env = {**os.environ, **pod_env(procs=2)}
    code = "import os, time, sys; sys.exit(3) if os.environ['HOROVOD_LOCAL_RANK'] == '1' else time.sleep(60)"
    t0 = time.monotonic()
    assert Processes.start([sys.executable, "-c", code], HorovodPod.from_env(env), env).wait() == 3
    assert time.monotonic() - t0 < 30


def test_sigterm_reaches_every_process(tmp_path):
    """The launcher as a pod runs it: waiting for the server, then P processes; SIGTERM → 143."""
    port = free_port()
    env = {**os.environ, **pod_env(procs=2, rank=1, port=port), constants.ENV_STOP_GRACE_SECONDS: "5"}
    launcher = subprocess.Popen([sys.executable, "-m", "phalanx_runtime.horovod_launch", "--", sys.executable, "-c",
                                 "import sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(120)"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import socket

    with socket.socket() as server:  # stands in for pod 0's rendezvous server
        server.bind(("127.0.0.1", port))
        server.listen()
        # one write per line (print() under PYTHONUNBUFFERED writes "up" and "\n" apart, and two
        # processes on one pipe then interleave them: "upup\n")
        lines = [launcher.stdout.readline() for _ in range(2)]
        assert lines == ["up\n", "up\n"]
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(30) == 143
    assert "ranks 2..3 of 4" in launcher.stderr.read()


def test_sigterm_while_waiting_for_the_server_stops_the_launcher():
    env = {**os.environ, **pod_env(rank=1, port=free_port())}
    launcher = subprocess.Popen([sys.executable, "-m", "phalanx_runtime.horovod_launch", "--", "true"], env=env,
                                stderr=subprocess.PIPE, text=True)
    assert "waiting for the rendezvous server 127.0.0.1:" in launcher.stderr.readline()  # nobody listens
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(30) == 143
    assert "starting" not in launcher.stderr.read()


def test_pod_0_without_horovod_is_a_permanent_failure(tmp_path):
    (tmp_path / "horovod").mkdir()  # shadows any installed Horovod: `import horovod.runner` fails
    (tmp_path / "horovod" / "__init__.py").write_text("")
    env = {**os.environ, **pod_env(rank=0, port=free_port())}
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{PYTHONPATH}"
    p = subprocess.run([sys.executable, "-m", "phalanx_runtime.horovod_launch", "--", "true"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "pod 0 needs Horovod in the image" in p.stderr


def test_a_pod_env_that_is_not_horovods_is_refused():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
    p = subprocess.run([sys.executable, "-m", "phalanx_runtime.horovod_launch", "--", "true"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "HOROVOD_GLOO_RENDEZVOUS_ADDR is not set" in p.stderr


# --- with Horovod ------------------------------------------------------------------------------

def horovod_python() -> str:
    """The Horovod venv's python; skip without it, unless ``PHALANX_HOROVOD_REQUIRED=1`` (``make
    test``, ``make test-horovod``): then hack/horovod/venv.sh makes it (a few minutes, once), or
    waits for the build under way, and the test fails if that fails."""
    venv_sh = str(ROOT / "hack/horovod/venv.sh")
    venv = Path(subprocess.run([venv_sh, "--print-dir"], capture_output=True, text=True, check=True).stdout.strip())
    python = venv / "bin" / "python"
    if (venv / ".complete").is_file() and python.is_file():
        return str(python)
    why = f"no Horovod venv at {venv}: run `make test-horovod` (hack/horovod/venv.sh builds it, a few minutes once)"
    if os.environ.get("PHALANX_HOROVOD_REQUIRED") != "1":
        pytest.skip(why)
    made = subprocess.run([venv_sh], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.fail(f"{why}; hack/horovod/venv.sh failed:\n{made.stderr[-3000:]}", pytrace=False)
    return str(python)


def horovod_job(python: str, out: Path, nodes: int, procs: int) -> TrainingJob:
    script_env = {"OUT_DIR": str(out), "STEPS": str(STEPS), "GLOBAL_BATCH": str(GLOBAL_BATCH), "LR": str(LR)}
    return TrainingJob.model_validate({
        "metadata": {"name": "hvd", "namespace": "ml"},
        "spec": {"image": "x", "framework": "horovod", "nodes": nodes, "procsPerNode": procs,
                 "command": [python, "-m", "phalanx_runtime.horovod_launch", "--"], "args": [python, str(SCRIPT)],
                 "env": [{"name": k, "value": v} for k, v in script_env.items()]}})


def local_pods(job: TrainingJob, port: int) -> list[tuple[list[str], dict[str, str]]]:
    """Each rendered pod's command and env (HOROVOD_* and the job's), the server moved to 127.0.0.1."""
    pods = sorted((c for c in render_children(job) if c["kind"] == "Pod"),
                  key=lambda p: int(p["metadata"]["labels"][constants.LABEL_NODE_RANK]))
    user = {e.name for e in job.spec.env}
    out = []
    for pod in pods:
        c = pod["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in c["env"] if e["name"].startswith("HOROVOD_") or e["name"] in user}
        assert env[constants.ENV_HOROVOD_RENDEZVOUS_ADDR] == "hvd-node-0.hvd"
        assert env[constants.ENV_HOROVOD_RENDEZVOUS_PORT] == str(constants.HOROVOD_RENDEZVOUS_PORT)
        env |= {constants.ENV_HOROVOD_RENDEZVOUS_ADDR: "127.0.0.1", constants.ENV_HOROVOD_RENDEZVOUS_PORT: str(port)}
        out.append((c["command"] + c.get("args", []), env))
    return out


def run_pods(job: TrainingJob, delay: float = 2.0) -> list[subprocess.CompletedProcess]:
    """The pods as local launchers, the last first: the others wait for pod 0's server."""
    pods = local_pods(job, free_port())
    procs: dict[int, subprocess.Popen] = {}
    base = {**os.environ, "PYTHONPATH": PYTHONPATH, "PYTHONUNBUFFERED": "1"}
    for i in reversed(range(len(pods))):
        cmd, env = pods[i]
        procs[i] = subprocess.Popen(cmd, env={**base, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if i:
            time.sleep(delay)
    try:
        return [subprocess.CompletedProcess(procs[i].args, procs[i].wait(300), procs[i].communicate()[0])
                for i in range(len(pods))]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()


def reference() -> dict:
    """One process on the full batch, from rank 0's initial weights."""
    import torch

    sys.path.insert(0, str(HERE))
    import horovod_user_script as user

    model, batches = user.build(0, 1, GLOBAL_BATCH, STEPS)
    losses = user.train(model, batches, torch.optim.SGD(model.parameters(), lr=LR))
    return {"losses": losses, "weights": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()}


@pytest.mark.parametrize("nodes, procs", [(2, 1), (1, 2)])
def test_rendered_pods_train_with_distributed_optimizer_like_one_process(tmp_path, nodes, procs):
    python = horovod_python()
    job = horovod_job(python, tmp_path, nodes, procs)
    t0 = time.monotonic()
    done = run_pods(job)
    seconds = time.monotonic() - t0
    for p in done:
        assert p.returncode == 0, p.stdout[-4000:]
    assert "rendezvous server on :" in done[0].stdout
    got = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(nodes * procs)]
    for rank, g in enumerate(got):
        assert (g["rank"], g["size"], g["local_rank"], g["local_size"]) == (rank, nodes * procs, rank % procs, procs)
        assert (g["cross_rank"], g["cross_size"]) == (rank // procs, nodes) and g["gloo"]
        assert g["env"][constants.ENV_HOROVOD_HOSTNAME] == f"hvd-node-{rank // procs}"
        assert g["env"][constants.ENV_HOROVOD_RANK] == str(rank) and g["replicas_equal"]
    ref = reference()
    import numpy as np

    dev = float(np.abs(np.array(got[0]["weights"]) - np.array(ref["weights"])).max())
    print(f"\nHorovod {nodes} pod(s) x {procs}: {seconds:.1f}s, max weight deviation from 1 process {dev:.1e}")
    assert dev < 1e-5, (got[0]["weights"], ref["weights"])
    assert ref["losses"][-1] < ref["losses"][0]  # it trains


def test_phalanx_local_runs_a_horovod_job_like_its_pods(tmp_path):
    """`phalanx local` moves worker 0's rendezvous server to 127.0.0.1 and a free port: the two
    pods train through the launcher and match one process."""
    python = horovod_python()
    doc = horovod_job(python, tmp_path, 2, 1).model_dump(by_alias=True, mode="json", exclude_none=True)
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(doc))
    p = subprocess.run([sys.executable, "-m", "phalanx", "local", str(path), "--json"], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert p.returncode == 0, p.stderr[-4000:]
    assert json.loads(p.stdout.strip().splitlines()[-1])["exit_codes"] == [0, 0]
    got = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    assert [(g["rank"], g["size"], g["cross_rank"]) for g in got] == [(0, 2, 0), (1, 2, 1)]
    assert got[1]["env"][constants.ENV_HOROVOD_RENDEZVOUS_ADDR] == "127.0.0.1"
    import numpy as np

    dev = float(np.abs(np.array(got[0]["weights"]) - np.array(reference()["weights"])).max())
    assert dev < 1e-5
