"""What a new gang goes on from, in its status messages: the last checkpoint only with a
checkpoint volume (without one the job saves none)."""

from __future__ import annotations

import pytest

from phalanx.api.types import TrainingJob
from phalanx.lifecycle.resume import (
    FROM_CHECKPOINT,
    FROM_STEP_ZERO,
    keeps_checkpoints,
    resume_phrase,
)


@pytest.mark.parametrize("checkpoint, phrase", [
    (None, FROM_STEP_ZERO),
    ({"intervalSteps": 0}, FROM_STEP_ZERO),
    ({"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}}, FROM_CHECKPOINT),
    ({"volume": {"emptyDir": {}}, "intervalSteps": 5}, FROM_CHECKPOINT),
])
def test_resume_phrase(job_obj, checkpoint, phrase):
    if checkpoint is not None:
        job_obj["spec"]["checkpoint"] = checkpoint
    assert resume_phrase(TrainingJob.model_validate(job_obj).spec) == phrase


@pytest.mark.parametrize("checkpoint, kept", [
    (None, False), ({}, False), ({"volume": None}, False), ({"intervalSteps": 5}, False),
    ({"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}}, True),
])
def test_keeps_checkpoints_reads_the_typed_and_the_wire_form_alike(job_obj, checkpoint, kept):
    if checkpoint is not None:
        job_obj["spec"]["checkpoint"] = checkpoint
    wire = job_obj["spec"]
    assert keeps_checkpoints(wire) is kept
    assert keeps_checkpoints(TrainingJob.model_validate(job_obj).spec) is kept
