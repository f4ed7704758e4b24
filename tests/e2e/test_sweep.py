"""A TrainingSweep on real pods: a 4-trial learning-rate sweep of the built-in debug model, two
trials at a time, finishes with the best trial reported and the hopeless learning rates stopped
early (suspended: their checkpoint stays on the shared volume)."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

GROUP, VERSION, SWEEPS = "phalanx.dev", "v1alpha1", "trainingsweeps"
pytestmark = pytest.mark.timeout(1800)


def lr_sweep(name: str, image: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingSweep",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "image": image,
                "nodes": 1,
                "procsPerNode": 1,
                "resources": {"cpu": "500m", "memory": "2Gi"},
                "model": {"preset": "debug"},
                "data": {"source": "corpus", "seqLen": 64},
                "training": {"steps": 40, "globalBatchSize": 8, "precision": "fp32"},
                "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "phalanx-shared"}},
                               "intervalSteps": 10, "async": False},
                "failurePolicy": {"maxRestarts": 2, "backoffSeconds": 1},
            }},
            # Two that learn, then two that cannot: those start after one of the first two
            # finished and meet two values at step 10 (minTrials), both far better.
            "parameters": [{"path": "training.lr", "values": [0.003, 0.01, 0.00001, 0.000001]}],
            "objective": {"metric": "finalLoss", "goal": "minimize"},
            "maxParallel": 2,
            "earlyStopping": {"rule": "median", "graceSteps": 10, "minTrials": 2},
        },
    }


@pytest.fixture
def sweep(e2e_api, operator_deployment, namespace, runtime_image, shared_dir):
    custom = client.CustomObjectsApi(e2e_api)
    name = "e2e-lr"
    for trial in range(4):  # a rerun must not resume the last run's checkpoints
        if shared_dir:
            import shutil

            shutil.rmtree(shared_dir / namespace / f"{name}-{trial}", ignore_errors=True)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, SWEEPS, lr_sweep(name, runtime_image))
    yield custom, name
    try:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, SWEEPS, name,
                                               body={"propagationPolicy": "Background"})
    except client.ApiException:
        pass


def test_lr_sweep_finishes_with_best_trial_and_one_stopped_early(sweep, namespace, shared_dir):
    custom, name = sweep
    most_unfinished, seen = 0, []
    deadline = time.monotonic() + 1500
    status: dict = {}
    while time.monotonic() < deadline:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, SWEEPS, name).get("status") or {}
        trials = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trainingjobs",
                                                      label_selector=f"phalanx.dev/sweep={name}")["items"]
        unfinished = [t for t in trials if (t.get("status") or {}).get("phase") not in ("Succeeded", "Failed", "Suspended")]
        most_unfinished = max(most_unfinished, len(unfinished))
        line = (status.get("phase"), status.get("progress"), [(t["name"], t.get("phase"), t.get("step")) for t in status.get("trials", [])])
        if not seen or seen[-1] != line:
            seen.append(line)
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(3)
    history = "\n".join(map(str, seen[-15:]))
    assert status.get("phase") == "Succeeded", f"sweep did not succeed: {status.get('message')}\n{history}"
    assert most_unfinished <= 2, f"{most_unfinished} unfinished trials at once (maxParallel 2)\n{history}"
    assert status["progress"] == "4/4"
    by_name = {t["name"]: t for t in status["trials"]}
    stopped = [t for t in status["trials"] if t["phase"] == "Stopped"]
    assert stopped, f"no trial stopped early\n{history}"
    assert all(t["reason"] == "EarlyStopped" and "median" in t["message"] for t in stopped), stopped
    assert {t["name"] for t in stopped} <= {f"{name}-2", f"{name}-3"}, stopped
    best = status["bestTrial"]
    assert best["name"] in (f"{name}-0", f"{name}-1") and best["value"] == by_name[best["name"]]["value"]
    assert best["parameters"]["training.lr"] in (0.003, 0.01)
    assert best["value"] < 4.0, best  # the debug model on the corpus starts at ~5.5
    for t in stopped:  # suspended, not deleted: the checkpoint it saved stays
        job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingjobs", t["name"])
        assert job["spec"]["suspend"] is True and job["status"]["phase"] == "Suspended"
        assert job["metadata"]["ownerReferences"][0]["kind"] == "TrainingSweep"
        if shared_dir:
            assert list((shared_dir / namespace / t["name"]).glob("step-*/COMMITTED")), f"{t['name']}: no checkpoint kept"
