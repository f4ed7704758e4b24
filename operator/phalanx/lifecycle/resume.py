"""What a new gang of a job goes on from, said in its status messages: the last checkpoint when
the job has a checkpoint volume, step 0 when it has none (it saves no checkpoints: there is
nowhere in the pod that outlives it, render/pod.py)."""

from __future__ import annotations

from phalanx.api.types import TrainingJobSpec

FROM_CHECKPOINT = "resumes from the last checkpoint"
FROM_STEP_ZERO = "starts again from step 0 (no checkpoint volume)"


def resume_phrase(spec: TrainingJobSpec) -> str:
    return FROM_STEP_ZERO if spec.checkpoint.volume is None else FROM_CHECKPOINT
