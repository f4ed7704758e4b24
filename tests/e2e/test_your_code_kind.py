"""The user's own code on real pods: command jobs of 2 nodes × 1 process (CPU, gloo) running scripts
with nothing of Phalanx in them, their progress read from their logs by ``spec.progress``'s
collector on rank 0's pod.

- a Hugging Face ``Trainer`` script (tests/runtime/user_code/hf_trainer.py; the runtime image has
  the ``hf`` extra): the status shows step and loss while it trains, then Succeeded with the
  script's last step and its eval_loss;
- a plain torch DDP loop whose rank 1 stops stepping (the others block in the all-reduce): no step
  progress for hangTimeoutSeconds is a hang, the operator restarts the gang (an Event says Hang);
- the same loop whose loss turns NaN: condition LossNotFinite.

The scripts reach the pods in a ConfigMap mounted at /workspace (as tests/e2e/test_deepspeed.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from phalanx.constants import ConditionType, Reason
from phalanx_common.contract import Collector
from tests.e2e.test_kind_e2e import follow, logs

ROOT = Path(__file__).resolve().parents[2]
USER_CODE = ROOT / "tests" / "runtime" / "user_code"
SCRIPTS = ("hf_trainer.py", "torch_ddp.py")
DDP_PATTERNS = [r"^step (?P<step>\d+)/(?P<total_steps>\d+) loss=(?P<loss>\S+) lr=(?P<learning_rate>\S+)"]
HF_STEPS = 200

pytestmark = [
    pytest.mark.timeout(900),
]


@pytest.fixture
def user_code(jobs):
    name = jobs.config_map("e2e-user-code", {script: (USER_CODE / script).read_text() for script in SCRIPTS})
    yield name
    jobs.core.delete_namespaced_config_map(name, jobs.ns)


def command_job(name: str, image: str, config_map: str, script: str, args: list[str], progress: dict,
                failure_policy: dict) -> dict:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "image": image,
            "command": ["torchrun"],
            "args": ["--nproc-per-node=$(PET_NPROC_PER_NODE)", f"/workspace/{script}", *args],
            "nodes": 2,
            "procsPerNode": 1,
            "resources": {"cpu": "500m", "memory": "2Gi"},
            "progress": progress,
            "volumes": [{"name": "workspace", "configMap": {"name": config_map}}],
            "volumeMounts": [{"name": "workspace", "mountPath": "/workspace", "readOnly": True}],
            "failurePolicy": failure_policy,
        },
    }


def test_hf_trainer_shows_step_and_loss_then_succeeds(jobs, runtime_image, user_code):
    name = "e2e-hf-trainer"
    jobs.create(command_job(name, runtime_image, user_code, "hf_trainer.py",
                            ["--output-dir", "$(TMPDIR)/hf-out", "--max-steps", str(HF_STEPS),
                             "--eval-steps", "50", "--save-steps", "100"],
                            {"collector": Collector.HUGGINGFACE}, {"maxRestarts": 0}))
    rows = []  # what `kubectl get tj` printed while the job ran

    def succeeded(status: dict) -> bool:
        if status.get("phase") == "Running" and status.get("step"):
            rows.append(jobs.table_row(name))
        return status.get("phase") == "Succeeded"

    seen = follow(jobs, name, succeeded, 600)
    assert any(row["Step"] is not None and row["Loss"] is not None for row in rows), rows
    during = [s for s in seen if s.get("phase") == "Running" and 0 < s.get("step", 0) < HF_STEPS]
    assert during, f"no status showed the run in progress: {seen}"
    assert all(math.isfinite(s["loss"]) for s in during if "loss" in s), during
    assert any("loss" in s for s in during), during
    final = seen[-1]
    assert final["step"] == HF_STEPS and math.isfinite(final["loss"]), final
    assert final.get("totalSteps") == HF_STEPS, final
    assert math.isfinite(final["metrics"]["eval_loss"]), final
    assert final.get("restarts", 0) == 0, final


def test_rank_stuck_in_a_collective_is_a_hang_and_restarts_the_gang(jobs, runtime_image, user_code):
    """Rank 1 stops at step 5 of every attempt; rank 0 blocks in the next all-reduce after logging
    step 4: 20 s without step progress is a hang. maxRestarts 1: one restart, then Failed."""
    name = "e2e-user-hang"
    jobs.create(command_job(name, runtime_image, user_code, "torch_ddp.py",
                            ["--steps", "1000", "--step-seconds", "0.5", "--hang-at-step", "5"],
                            {"collector": Collector.REGEX, "patterns": DDP_PATTERNS},
                            {"hangTimeoutSeconds": 20, "maxRestarts": 1, "backoffSeconds": 1}))
    seen = follow(jobs, name, lambda s: s.get("phase") == "Failed", 600)
    final = seen[-1]
    assert final["restarts"] >= 1, final
    assert any(s.get("step") == 4 for s in seen), f"rank 0's last step before the hang was not seen: {seen}"
    events = jobs.events(name)
    hang = [e for e in events if e.reason == Reason.HANG or Reason.HANG in (e.message or "")]
    assert hang, [(e.reason, e.message) for e in events]
    assert any("no step progress for" in (e.message or "") for e in hang), [(e.reason, e.message) for e in hang]
    # the hang Event carries rank 0's last log lines
    assert any("step 4/1000 loss=" in (e.message or "") for e in hang), [(e.reason, e.message) for e in hang]
    failed = next(c for c in final["conditions"] if c["type"] == ConditionType.FAILED)
    assert failed["reason"] == Reason.MAX_RESTARTS_EXCEEDED, (failed, logs(jobs, name))


def test_nan_loss_of_a_users_script_sets_loss_not_finite(jobs, runtime_image, user_code):
    name = "e2e-user-nan"
    jobs.create(command_job(name, runtime_image, user_code, "torch_ddp.py",
                            # NaN from step 4 for ~18 s: several of the operator's progress polls see it
                            ["--steps", "40", "--step-seconds", "0.5", "--nan-at-step", "4"],
                            {"collector": Collector.REGEX, "patterns": DDP_PATTERNS}, {"maxRestarts": 0}))
    final = follow(jobs, name, lambda s: s.get("phase") in ("Succeeded", "Failed"), 600)[-1]
    assert final["phase"] == "Succeeded" and final["step"] == 40, final
    cond = next(c for c in final["conditions"] if c["type"] == ConditionType.LOSS_NOT_FINITE)
    assert cond["status"] == "True", cond
    assert "loss" not in final or final["loss"] == final["loss"]  # never NaN in the stored status
    assert any(e.reason == cond["reason"] for e in jobs.events(name)), "a Warning event says the loss diverged"
