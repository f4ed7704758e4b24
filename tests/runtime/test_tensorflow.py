"""framework: tensorflow command jobs through `phalanx local`: a 2-node job whose
pods the operator renders with TF_CONFIG (the same job's pods, from the real renderer, are checked
against what each local worker saw), run as 2 local processes with tensorflow-cpu's
MultiWorkerMirroredStrategy (tensorflow_user_script.py). The two workers train in sync (the same
loss every step and the same final weights, bit for bit) and match one worker trained on the same
global batches without TF_CONFIG.

TensorFlow runs from its own cached venv (`make tf-venv`, hack/tensorflow/venv.sh), never from the
project's Python environment; `make test` builds it first. Without it this test fails, naming
`make tf-venv` (it does not skip: CI must run it)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from phalanx import constants
from phalanx.api.types import TrainingJob
from phalanx.render.job import render_children
from tests.runtime.test_local_command import phalanx_local

pytestmark = [pytest.mark.runtime, pytest.mark.built_last]  # make test builds its venv last (hack/test.sh)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "tensorflow_user_script.py"
STEPS, GLOBAL_BATCH, LR = 20, 32, 0.05


def run_local(tmp_path: Path, doc: dict, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    """``phalanx local --json`` on ``doc`` (written to tmp_path/job.yaml): the process and its seconds."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    t0 = time.monotonic()
    p = phalanx_local(path, "--json", timeout=timeout)
    return p, time.monotonic() - t0


def tf_python() -> str:
    """The TF venv's python: hack/tensorflow/venv.sh makes it when missing (a pip install, once), or
    waits for the install under way; a failure says what failed."""
    made = subprocess.run([str(ROOT / "hack/tensorflow/venv.sh")], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.fail(f"hack/tensorflow/venv.sh failed:\n{made.stderr[-3000:]}", pytrace=False)
    python = Path(made.stdout.strip()) / "bin" / "python"
    assert python.is_file(), f"hack/tensorflow/venv.sh made no {python}"
    return str(python)


def script_env(out: Path) -> dict[str, str]:
    return {"OUT_DIR": str(out), "STEPS": str(STEPS), "GLOBAL_BATCH": str(GLOBAL_BATCH), "LR": str(LR)}


def tf_job(python: str, out: Path, nodes: int = 2) -> dict:
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "tf-mwms", "namespace": "ml"},
            "spec": {"image": "x", "framework": "tensorflow", "nodes": nodes, "command": [python, str(SCRIPT)],
                     "env": [{"name": k, "value": v} for k, v in script_env(out).items()]}}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """One worker (no TF_CONFIG) on the same global batches."""
    python = tf_python()
    out = tmp_path_factory.mktemp("tf-reference")
    env = {k: v for k, v in os.environ.items() if k != constants.ENV_TF_CONFIG}
    p = subprocess.run([python, str(SCRIPT)], env={**env, **script_env(out)}, capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads((out / "worker-0.json").read_text())


def rendered_tf_configs(doc: dict) -> list[dict]:
    """TF_CONFIG of each pod the operator renders for ``doc``, in node-rank order."""
    pods = [c for c in render_children(TrainingJob.model_validate(doc)) if c["kind"] == "Pod"]
    pods.sort(key=lambda p: int(p["metadata"]["labels"][constants.LABEL_NODE_RANK]))
    return [json.loads(next(e["value"] for e in p["spec"]["containers"][0]["env"] if e["name"] == constants.ENV_TF_CONFIG))
            for p in pods]


def flat(weights: list) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(w, dtype=np.float64)) for w in weights])


def test_mwms_two_workers_through_phalanx_local(tmp_path, reference):
    python = tf_python()
    out = tmp_path / "out"
    out.mkdir()
    doc = tf_job(python, out)
    p, seconds = run_local(tmp_path, doc, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    assert json.loads(p.stdout.strip().splitlines()[-1])["exit_codes"] == [0, 0]
    got = [json.loads((out / f"worker-{i}.json").read_text()) for i in range(2)]

    # What each worker saw is the pod's rendered TF_CONFIG, its addresses moved to 127.0.0.1.
    rendered = rendered_tf_configs(doc)
    assert [r["cluster"]["worker"] for r in rendered] == [[f"tf-mwms-node-{i}.tf-mwms.ml.svc:29500" for i in range(2)]] * 2
    local = got[0]["tf_config"]["cluster"]["worker"]
    assert all(a.startswith("127.0.0.1:") for a in local) and len(set(local)) == 2
    for rank, (g, r) in enumerate(zip(got, rendered, strict=True)):
        assert g["tf_config"]["task"] == r["task"] == {"type": "worker", "index": rank}
        assert g["tf_config"]["cluster"] == {"worker": local}
        assert (g["task_type"], g["task_id"], g["workers"], g["replicas_in_sync"]) == ("worker", rank, 2, 2)

    # In sync: the same global loss every step and the same weights, bit for bit.
    assert got[0]["losses"] == got[1]["losses"]
    assert np.array_equal(flat(got[0]["weights"]), flat(got[1]["weights"]))
    # …and the same training as one worker on the whole global batch.
    assert reference["workers"] == 1 and len(got[0]["losses"]) == STEPS
    loss_dev = max(abs(a - b) / abs(b) for a, b in zip(got[0]["losses"], reference["losses"], strict=True))
    weight_dev = float(np.abs(flat(got[0]["weights"]) - flat(reference["weights"])).max())
    print(f"\nTensorFlow {got[0]['tf_version']} MWMS, 2 workers via phalanx local: {seconds:.1f}s, max relative loss "
          f"deviation from 1 worker {loss_dev:.1e}, max weight deviation {weight_dev:.1e}")
    assert loss_dev < 1e-5, (got[0]["losses"], reference["losses"])
    assert weight_dev < 1e-5
    assert reference["losses"][-1] < 0.75 * reference["losses"][0]  # it trains
