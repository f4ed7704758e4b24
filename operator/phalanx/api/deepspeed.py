"""Rules of ``framework: deepspeed`` command jobs (api/types.py adds them to the spec's checks).

The parallelism and training fields DeepSpeed honours are rendered into its config
(phalanx.frameworks.deepspeed); the ones it has no equivalent for are refused, each by its field.
Each rule has its CEL twin (``self`` is the spec). This module imports no API model (api/types.py
imports it): values compare as strings (the enums are StrEnums).
"""

from __future__ import annotations

from phalanx.api.rules import Rule

FRAMEWORK = "deepspeed"
_DS = f"!has(self.framework) || self.framework != '{FRAMEWORK}' || "


def _ds(holds):
    return lambda s: s.framework != FRAMEWORK or holds(s)


def _ds_batch_ok(s) -> bool:
    p = s.parallelism
    micro = p.microbatches if p.pipeline > 1 else s.training.micro_batch_size
    return s.training.global_batch_size % (micro * (s.world_size // p.pipeline)) == 0


DEEPSPEED_RULES = (
    Rule(_DS + "(has(self.command) && !has(self.model))",
         "framework deepspeed runs your own script: set command (e.g. torchrun … train.py), not model",
         _ds(lambda s: s.command is not None and s.model is None), ".framework"),
    Rule(_DS + "self.parallelism.tensor == 1",
         "framework deepspeed: spec.parallelism.tensor must be 1 (tensor parallelism is not rendered for DeepSpeed)",
         _ds(lambda s: s.parallelism.tensor == 1), ".parallelism.tensor"),
    Rule(_DS + "!self.parallelism.sequenceParallel",
         "framework deepspeed: spec.parallelism.sequenceParallel is not supported (no tensor parallelism)",
         _ds(lambda s: not s.parallelism.sequence_parallel), ".parallelism.sequenceParallel"),
    Rule(_DS + "self.parallelism.replicate == 1",
         "framework deepspeed: spec.parallelism.replicate (HSDP) must be 1",
         _ds(lambda s: s.parallelism.replicate == 1), ".parallelism.replicate"),
    Rule(_DS + "(self.nodes * self.procsPerNode) % self.parallelism.pipeline == 0",
         "framework deepspeed: nodes × procsPerNode must be divisible by parallelism.pipeline",
         _ds(lambda s: s.world_size % s.parallelism.pipeline == 0), ".parallelism.pipeline"),
    Rule(_DS + "!has(self.parallelism.data) || self.parallelism.data * self.parallelism.pipeline == self.nodes * self.procsPerNode",
         "framework deepspeed: nodes × procsPerNode must equal parallelism.data × pipeline",
         _ds(lambda s: s.parallelism.data is None or s.parallelism.data * s.parallelism.pipeline == s.world_size),
         ".parallelism.data"),
    Rule(_DS + "self.parallelism.pipeline == 1 || self.parallelism.zero <= 1",
         "framework deepspeed: DeepSpeed's pipeline engine takes zero 0 or 1 (pipeline > 1)",
         _ds(lambda s: s.parallelism.pipeline == 1 or s.parallelism.zero <= 1), ".parallelism.zero"),
    Rule(_DS + "self.parallelism.pipelineSchedule == '1F1B' && self.parallelism.virtualStages == 1",
         "framework deepspeed: DeepSpeed runs its own 1F1B pipeline schedule (pipelineSchedule 1F1B, virtualStages 1)",
         _ds(lambda s: s.parallelism.pipeline_schedule == "1F1B" and s.parallelism.virtual_stages == 1),
         ".parallelism.pipelineSchedule"),
    Rule(_DS + "!self.parallelism.cpuOffload || self.parallelism.zero >= 1",
         "framework deepspeed: cpuOffload needs zero 1, 2 or 3",
         _ds(lambda s: not s.parallelism.cpu_offload or s.parallelism.zero >= 1), ".parallelism.cpuOffload"),
    Rule(_DS + "self.training.gradCompression != 'powersgd'",
         "framework deepspeed: gradCompression powersgd is a torch DDP hook (bf16 becomes DeepSpeed's communication_data_type)",
         _ds(lambda s: s.training.grad_compression != "powersgd"), ".training.gradCompression"),
    Rule(_DS + "self.training.globalBatchSize % ((self.parallelism.pipeline == 1 ? self.training.microBatchSize : self.parallelism.microbatches) * ((self.nodes * self.procsPerNode) / self.parallelism.pipeline)) == 0",
         "framework deepspeed: globalBatchSize must be a multiple of microBatchSize (microbatches with pipeline > 1) × data-parallel ranks",
         _ds(_ds_batch_ok), ".training.globalBatchSize"),
    Rule(_DS + "!has(self.elastic)",
         "framework deepspeed: the DeepSpeed config is rendered for nodes × procsPerNode; elastic is not supported",
         _ds(lambda s: s.elastic is None), ".elastic"),
)
