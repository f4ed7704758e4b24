"""Every example that says ``# Runs on kind: yes`` trains to Succeeded on the kind cluster, created
from its file unchanged (the image aside: the suite's runtime image, the one the file names by
default) in the suite's namespace, where ``hack/kind-e2e.sh up`` made the PVC phalanx-shared.
Examples another test already runs from their file (tests/example_files.RUN_ELSEWHERE) are not run
twice. They all start at once and queue for the two workers as users' jobs would.

The first job (examples/first-job.yaml, what the chart's NOTES suggest) has no checkpoint volume:
its pods get no checkpoint dir and no volume for one, and it ends with no checkpoint.
"""

from __future__ import annotations

import copy
import re
import shutil
import time

import pytest
from kubernetes import client

from phalanx import constants
from tests.e2e.test_kind_e2e import logs
from tests.example_files import EXAMPLES, RUN_ELSEWHERE, documents, header

pytestmark = pytest.mark.timeout(1800)
RUNNABLE = [p for p in EXAMPLES if header(p).runs_on_kind and p.name not in RUN_ELSEWHERE]
PLURALS = {constants.KIND: "trainingjobs", constants.SWEEP_KIND: "trainingsweeps"}
TIMEOUT = 1500


@pytest.fixture
def applied(jobs, e2e_api, namespace, runtime_image, shared_dir):
    """Every document of the runnable examples, created; deleted (with their trials) afterwards."""
    custom = client.CustomObjectsApi(e2e_api)
    created: list[tuple[str, str]] = []
    for path in RUNNABLE:
        for doc in documents(path):
            doc = copy.deepcopy(doc)
            spec = doc["spec"]["template"]["spec"] if doc["kind"] == constants.SWEEP_KIND else doc["spec"]
            if "image" in spec:  # the examples that name none run on the chart's runtime image (runtimeImage)
                spec["image"] = runtime_image
            name = doc["metadata"]["name"]
            if shared_dir:  # a rerun must not resume the last run's checkpoints (trials: <sweep>-<i>)
                for d in (shared_dir / namespace).glob(f"{name}*"):
                    if re.fullmatch(rf"{re.escape(name)}(-\d+)?", d.name):
                        shutil.rmtree(d, ignore_errors=True)
            custom.create_namespaced_custom_object(constants.GROUP, constants.VERSION, namespace, PLURALS[doc["kind"]],
                                                   {**doc, "metadata": {**doc["metadata"], "namespace": namespace}})
            created.append((doc["kind"], name))
    yield created
    for kind, name in created:
        try:
            custom.delete_namespaced_custom_object(constants.GROUP, constants.VERSION, namespace, PLURALS[kind], name,
                                                   body={"propagationPolicy": "Background"})
        except client.ApiException:
            pass


def test_examples_marked_runnable_succeed_as_applied(applied, jobs, e2e_api, namespace):
    assert any(name == "first-job" for _, name in applied), "examples/first-job.yaml is not run"
    custom = client.CustomObjectsApi(e2e_api)
    left, final = dict.fromkeys(applied), {}
    deadline = time.monotonic() + TIMEOUT
    while left and time.monotonic() < deadline:
        for kind, name in list(left):
            status = custom.get_namespaced_custom_object(constants.GROUP, constants.VERSION, namespace, PLURALS[kind], name).get("status") or {}
            if status.get("phase") in ("Succeeded", "Failed"):
                final[name] = status
                del left[(kind, name)]
        time.sleep(3)
    failed = {n: s.get("message") for n, s in final.items() if s["phase"] != "Succeeded"}
    assert not left and not failed, (f"not finished in {TIMEOUT}s: {sorted(n for _, n in left)}; failed: {failed}\n"
                                     + "\n".join(logs(jobs, n) for _, n in applied))
    first = final["first-job"]
    assert first["step"] == 30 and first["restarts"] == 0 and not first.get("lastCheckpoint"), first
    for pod in jobs.pods("first-job"):
        env = {e.name for e in pod.spec.containers[0].env}
        assert constants.ENV_CHECKPOINT_DIR not in env, "no checkpoint volume: no checkpoint dir"
        assert constants.VOLUME_CHECKPOINT not in {v.name for v in pod.spec.volumes}
