"""A failed job says why, on real pods: the failing container's last error line reaches the Failed
condition, a Warning Event and status.lastFailure — from the log's last lines for a command job's
own script (terminationMessagePolicy FallbackToLogsOnError), from the runtime's own error report
for the built-in runtime."""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_kind_e2e import follow, small_job
from tests.integration.harness import wait_for

pytestmark = pytest.mark.timeout(900)

RAISES = "import os\nprint('starting', flush=True)\nraise RuntimeError('boom from rank ' + os.environ['NODE_RANK'])\n"


def command_job(name: str, image: str) -> dict:
    small = {"cpu": "100m", "memory": "128Mi"}
    return {
        "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {"image": image, "nodes": 2, "procsPerNode": 1, "resources": small,
                 "command": ["python3", "-c", RAISES],
                 "failurePolicy": {"maxRestarts": 0, "backoffSeconds": 1}},
    }


def failed_condition(jobs, name: str, timeout: float) -> tuple[dict, dict]:
    final = follow(jobs, name, lambda s: s.get("phase") == "Failed", timeout)[-1]
    return final, next(c for c in final["conditions"] if c["type"] == "Failed")


def warning_saying(jobs, name: str, text: str) -> object:
    return wait_for(lambda: next((e for e in jobs.events(name) if e.type == "Warning" and text in (e.message or "")), None),
                    60, f"a Warning Event of {name} saying {text!r}")


def test_a_command_jobs_error_reaches_the_failed_condition_and_an_event(jobs, runtime_image):
    name = "e2e-cause-cmd"
    jobs.create(command_job(name, runtime_image))
    final, failed = failed_condition(jobs, name, 300)
    assert failed["status"] == "True" and failed["reason"] == "PermanentFailure", failed
    said = re.search(r"cause: UserCodeError: RuntimeError: boom from rank ([01])", failed["message"])
    assert said, failed["message"]
    assert f"-node-{said.group(1)}-0 (node-rank {said.group(1)}) exited with code 1 (permanent)" in failed["message"]
    warning_saying(jobs, name, f"RuntimeError: boom from rank {said.group(1)}")
    last = final["lastFailure"]
    assert (last["category"], last["exitCode"], last["nodeRank"]) == ("UserCodeError", 1, int(said.group(1))), last
    assert last["message"] == f"RuntimeError: boom from rank {said.group(1)}", last


def test_the_runtimes_error_report_names_the_rank_and_the_kind_of_error(jobs, runtime_image):
    """The built-in runtime with a model entrypoint that is not in the image: the worker's
    ModuleNotFoundError, from its report (rank named), classified as a missing module."""
    name = "e2e-cause-runtime"
    obj = small_job(name, runtime_image, steps=5, interval=0)
    obj["spec"]["nodes"] = 1  # one pod: no peer whose own failure could be observed first
    obj["spec"]["model"] = {"entrypoint": "phalanx_e2e_missing_module:build"}
    jobs.create(obj)
    final, failed = failed_condition(jobs, name, 600)
    expected = "cause: MissingFileOrModule in rank 0: ModuleNotFoundError: No module named 'phalanx_e2e_missing_module'"
    assert expected in failed["message"], failed["message"]
    warning_saying(jobs, name, "No module named 'phalanx_e2e_missing_module'")
    last = final["lastFailure"]
    assert (last["category"], last["rank"], last["nodeRank"]) == ("MissingFileOrModule", 0, 0), last
