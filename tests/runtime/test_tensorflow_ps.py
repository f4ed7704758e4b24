"""framework: tensorflow with roles (heterogeneous gangs): ParameterServerStrategy through `phalanx
local`. A job of 2 workers (spec.nodes), a chief and 2 parameter servers (spec.roles), one process
per pod, each with the TF_CONFIG its pod gets (checked against the real renderer's pods, addresses
moved to 127.0.0.1) and its role's args and env. The chief (tensorflow_ps_script.py) builds a
ClusterCoordinator, places the variables on both ps tasks and schedules SGD steps on both workers;
the full-dataset loss falls. The workers and ps serve (`tf.distribute.Server.join()`) until
`phalanx local` stops them: the default success policy of a tensorflow job with a chief is the
chief alone, so the run succeeds when the chief exits 0.

TensorFlow runs from its own cached venv (`make tf-venv`); without it this test fails, naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx import constants
from phalanx.api.slots import slot_of
from phalanx.api.types import TrainingJob
from phalanx.render.job import render_children
from tests.runtime.test_tensorflow import run_local, tf_python

pytestmark = [pytest.mark.runtime, pytest.mark.built_last]  # make test builds its venv last (hack/test.sh)

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "tensorflow_ps_script.py"
STEPS = 40
TASKS = [("worker", 0), ("worker", 1), ("chief", 0), ("ps", 0), ("ps", 1)]  # the gang's slots, in order


def ps_job(python: str, out: Path) -> dict:
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "tf-ps", "namespace": "ml"},
            "spec": {"image": "x", "framework": "tensorflow", "nodes": 2,
                     "command": [python, str(SCRIPT)], "args": ["--serve"],  # workers and ps serve
                     "env": [{"name": "OUT_DIR", "value": str(out)}],
                     "roles": [{"name": "chief", "args": ["--coordinate"],
                                "env": [{"name": "STEPS", "value": str(STEPS)}, {"name": "LR", "value": "0.05"}]},
                               {"name": "ps", "replicas": 2}]}}


def rendered_tf_configs(doc: dict) -> dict[tuple[str, int], dict]:
    """TF_CONFIG of each pod the operator renders for ``doc``, by (role, index)."""
    out = {}
    for pod in (c for c in render_children(TrainingJob.model_validate(doc)) if c["kind"] == "Pod"):
        slot = slot_of(pod)
        env = pod["spec"]["containers"][0]["env"]
        out[(slot.role, slot.index)] = json.loads(next(e["value"] for e in env if e["name"] == constants.ENV_TF_CONFIG))
    return out


def test_parameter_server_strategy_chief_workers_ps_through_phalanx_local(tmp_path):
    python = tf_python()
    out = tmp_path / "out"
    out.mkdir()
    doc = ps_job(python, out)
    p, seconds = run_local(tmp_path, doc, timeout=400)
    assert p.returncode == 0, p.stderr[-4000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    # Success is the chief's exit 0; the servers were stopped after it (SIGTERM: -15).
    assert summary["success_roles"] == ["chief"] and summary["roles"]["chief"] == [0], summary
    assert summary["roles"]["worker"] == [-15, -15] and summary["roles"]["ps"] == [-15, -15], summary
    got = {(t, i): json.loads((out / f"{t}-{i}.json").read_text()) for t, i in TASKS}

    # Each task saw its pod's rendered TF_CONFIG, every address moved to a distinct 127.0.0.1 port.
    rendered = rendered_tf_configs(doc)
    assert set(rendered) == set(TASKS)
    cluster = got[("chief", 0)]["tf_config"]["cluster"]
    addresses = [a for tasks in cluster.values() for a in tasks]
    assert all(a.startswith("127.0.0.1:") for a in addresses) and len(set(addresses)) == 5
    for (role, index), g in got.items():
        r = rendered[(role, index)]
        assert g["tf_config"]["task"] == r["task"] == {"type": role, "index": index}
        assert g["tf_config"]["cluster"] == cluster
        assert {k: len(v) for k, v in r["cluster"].items()} == {"worker": 2, "chief": 1, "ps": 2}
        assert (g["task_type"], g["task_id"], g["role"], g["role_index"]) == (role, index, role, str(index))
        assert g["argv"] == (["--coordinate"] if role == "chief" else ["--serve"])  # the role's own args
    assert r["cluster"]["chief"] == ["tf-ps-chief-0.tf-ps.ml.svc:29500"]

    # The chief trained on both workers, with the variables on both parameter servers.
    chief = got[("chief", 0)]
    assert (chief["num_workers"], chief["num_ps"], chief["steps"]) == (2, 2, STEPS)
    assert {d.split("/device:")[0] for d in chief["variable_devices"]} == {
        "/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}
    assert set(chief["step_pids"]) == {got[("worker", 0)]["pid"], got[("worker", 1)]["pid"]}
    assert len(chief["losses"]) == STEPS
    first, last = chief["losses"][:5], chief["losses"][-5:]
    print(f"\nTensorFlow {chief['tf_version']} ParameterServerStrategy, 1 chief + 2 workers + 2 ps via phalanx local: "
          f"{seconds:.1f}s ({chief['seconds']:.1f}s in the chief), full-dataset loss {chief['initial_loss']:.4f} -> "
          f"{chief['final_loss']:.4f}, steps per worker "
          f"{[chief['step_pids'].count(got[('worker', i)]['pid']) for i in range(2)]}")
    assert sum(last) / 5 < 0.5 * sum(first) / 5, chief["losses"]
    assert chief["final_loss"] < 0.25 * chief["initial_loss"], (chief["initial_loss"], chief["final_loss"])
