"""What a new gang of a job goes on from, said in its status messages: the last checkpoint when
the job has a checkpoint volume, step 0 when it has none (it saves no checkpoints: there is
nowhere in the pod that outlives it, render/pod.py)."""

from __future__ import annotations

from phalanx.api.types import TrainingJobSpec

FROM_CHECKPOINT = "resumes from the last checkpoint"
FROM_STEP_ZERO = "starts again from step 0 (no checkpoint volume)"


def keeps_checkpoints(spec: TrainingJobSpec | dict) -> bool:
    """Whether the job has a checkpoint volume; ``spec`` typed or in its wire form (a sweep's trials)."""
    if isinstance(spec, dict):
        return bool((spec.get("checkpoint") or {}).get("volume"))
    return spec.checkpoint.volume is not None


def resume_phrase(spec: TrainingJobSpec) -> str:
    return FROM_CHECKPOINT if keeps_checkpoints(spec) else FROM_STEP_ZERO
