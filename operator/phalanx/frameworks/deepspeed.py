"""``framework: deepspeed``: the DeepSpeed config of a command job (pure: spec in, dict out).

It goes into the job's ConfigMap as ``deepspeed.json`` (mounted at /etc/phalanx with the runtime
config) and ``$PHALANX_DEEPSPEED_CONFIG`` points at it; ``phalanx local`` writes the same file.
The user's script passes it to ``deepspeed.initialize(config=os.environ["PHALANX_DEEPSPEED_CONFIG"])``
and brings its own model and optimizer (no optimizer or scheduler is rendered). What is refused
(tensor, replicate, other pipeline schedules, powersgd, elastic) is refused by the spec's rules
(api/deepspeed.py DEEPSPEED_RULES) before anything is rendered.
"""

from __future__ import annotations

import json
from typing import Any

from phalanx import constants
from phalanx.api.deepspeed import DEEPSPEED_RULES
from phalanx.api.types import Framework, GradCompression, Precision, TrainingJobSpec
from phalanx.frameworks.base import FrameworkPlugin


def uses_deepspeed(spec: TrainingJobSpec) -> bool:
    return spec.framework == Framework.DEEPSPEED


def batch_layout(spec: TrainingJobSpec) -> tuple[int, int, int]:
    """(train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps):
    DeepSpeed's identity batch = micro × accumulation × data-parallel ranks (world / pipeline).
    With pipeline > 1 the accumulation steps are the pipeline's microbatches."""
    p, t = spec.parallelism, spec.training
    data = spec.world_size // p.pipeline
    if p.pipeline > 1:
        accumulation = p.microbatches
        micro = t.global_batch_size // (accumulation * data)
    else:
        micro = t.micro_batch_size
        accumulation = t.global_batch_size // (micro * data)
    return t.global_batch_size, micro, accumulation


def deepspeed_config(spec: TrainingJobSpec) -> dict[str, Any]:
    p, t = spec.parallelism, spec.training
    batch, micro, accumulation = batch_layout(spec)
    zero: dict[str, Any] = {"stage": p.zero}
    cfg: dict[str, Any] = {
        "train_batch_size": batch,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accumulation,
        "zero_optimization": zero,
        # bf16 on GPUs only, as the built-in runtime (CPU runs fp32).
        "bf16": {"enabled": t.precision == Precision.BF16 and spec.resources.gpus > 0},
        "steps_per_print": t.log_every,
        # The script brings a torch optimizer (DeepSpeed's fused ones are compiled ops).
        "zero_allow_untested_optimizer": True,
    }
    if t.grad_clip > 0:
        cfg["gradient_clipping"] = t.grad_clip
    if p.cpu_offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": spec.resources.gpus > 0}
        if p.zero == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": spec.resources.gpus > 0}
        cfg["zero_force_ds_cpu_optimizer"] = False  # the script's torch optimizer, not DeepSpeedCPUAdam
    if t.grad_compression == GradCompression.BF16:
        cfg["communication_data_type"] = "bf16"
    if p.pipeline > 1:
        cfg["pipeline"] = {"stages": p.pipeline}
    return cfg


class DeepSpeed(FrameworkPlugin):
    framework = Framework.DEEPSPEED
    rules = DEEPSPEED_RULES

    def job_env(self, spec: TrainingJobSpec) -> list[dict[str, Any]]:
        return [{"name": constants.ENV_DEEPSPEED_CONFIG, "value": f"{constants.RUNTIME_CONFIG_DIR}/{constants.DEEPSPEED_CONFIG_FILE}"}]

    def config_files(self, spec: TrainingJobSpec) -> dict[str, str]:
        """Mounted next to config.json; $PHALANX_DEEPSPEED_CONFIG names it."""
        return {constants.DEEPSPEED_CONFIG_FILE: json.dumps(deepspeed_config(spec), indent=2, sort_keys=True)}


PLUGIN = DeepSpeed()
