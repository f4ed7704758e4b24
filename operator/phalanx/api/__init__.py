"""The Phalanx API: pydantic models (single source of truth), presets and operator config."""

from phalanx.api.config import NetworkProfile, OperatorConfig, TopologyConfig, TopologyLevel
from phalanx.api.types import (
    TERMINAL_PHASES,
    Condition,
    GangBackend,
    Phase,
    PipelineSchedule,
    TrainingJob,
    TrainingJobSpec,
    TrainingJobStatus,
)
from phalanx_common.presets import PRESETS, ModelShape, resolve_shape

__all__ = [
    "PRESETS", "TERMINAL_PHASES", "Condition", "GangBackend", "ModelShape", "NetworkProfile",
    "OperatorConfig", "Phase", "PipelineSchedule", "TopologyConfig", "TopologyLevel",
    "TrainingJob", "TrainingJobSpec", "TrainingJobStatus", "resolve_shape",
]
