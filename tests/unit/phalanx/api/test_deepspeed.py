"""framework deepspeed: the spec fields DeepSpeed has no equivalent for are refused, each by its
field; the batch must split over the data-parallel ranks."""

from __future__ import annotations

import pytest

from phalanx.api.deepspeed import DEEPSPEED_RULES
from phalanx.api.rules import broken
from phalanx.api.types import TrainingJobSpec


def spec(**fields) -> TrainingJobSpec:
    # 2 nodes × 4 procs: 8 ranks; the default batch is 8 sequences of micro batch 1
    return TrainingJobSpec.model_validate(
        {"image": "img:1", "command": ["torchrun", "train.py"], "nodes": 2, "procsPerNode": 4, **fields})


@pytest.mark.parametrize(("fields", "broken_fields"), [
    ({}, []),
    ({"parallelism": {"zero": 3, "cpuOffload": True}}, []),
    ({"parallelism": {"pipeline": 2, "microbatches": 2, "zero": 1}, "training": {"globalBatchSize": 8}}, []),
    ({"parallelism": {"data": 4, "pipeline": 2, "microbatches": 2}}, []),
    ({"command": None, "model": {"preset": "debug"}}, [".framework"]),
    ({"parallelism": {"tensor": 2}}, [".parallelism.tensor"]),
    ({"parallelism": {"sequenceParallel": True}}, [".parallelism.sequenceParallel"]),
    ({"parallelism": {"replicate": 2}}, [".parallelism.replicate"]),
    ({"parallelism": {"pipeline": 3, "microbatches": 3}, "training": {"globalBatchSize": 9}}, [".parallelism.pipeline", ".training.globalBatchSize"]),
    ({"parallelism": {"data": 2}}, [".parallelism.data"]),
    ({"parallelism": {"pipeline": 2, "microbatches": 2, "zero": 2}}, [".parallelism.zero"]),
    ({"parallelism": {"pipeline": 2, "microbatches": 2, "pipelineSchedule": "GPipe"}}, [".parallelism.pipelineSchedule"]),
    ({"parallelism": {"pipeline": 2, "microbatches": 2, "virtualStages": 2}}, [".parallelism.pipelineSchedule"]),
    ({"parallelism": {"cpuOffload": True}}, [".parallelism.cpuOffload"]),
    ({"training": {"gradCompression": "powersgd"}}, [".training.gradCompression"]),
    ({"elastic": {"minNodes": 1, "maxNodes": 2}}, [".elastic"]),
])
def test_deepspeed_rules_name_their_field(fields, broken_fields):
    assert [field for field, _, _ in broken(DEEPSPEED_RULES, spec(framework="deepspeed", **fields), "")] == broken_fields
    # another framework's job breaks none of them
    assert list(broken(DEEPSPEED_RULES, spec(**fields), "")) == []


@pytest.mark.parametrize(("parallelism", "training", "ok"), [
    ({}, {"globalBatchSize": 8, "microBatchSize": 1}, True),  # 1 × 8 ranks
    ({}, {"globalBatchSize": 16, "microBatchSize": 2}, True),
    ({}, {"globalBatchSize": 12, "microBatchSize": 1}, False),
    ({}, {"globalBatchSize": 8, "microBatchSize": 2}, False),
    # pipeline 2: 4 data-parallel ranks, microbatches (not microBatchSize) per rank
    ({"pipeline": 2, "microbatches": 2}, {"globalBatchSize": 8, "microBatchSize": 3}, True),
    ({"pipeline": 2, "microbatches": 4}, {"globalBatchSize": 8}, False),
    ({"pipeline": 2, "microbatches": 4}, {"globalBatchSize": 32}, True),
])
def test_the_batch_splits_over_the_data_parallel_ranks(parallelism, training, ok):
    deepspeed = spec(framework="deepspeed", parallelism=parallelism, training=training)
    fields = [field for field, _, _ in broken(DEEPSPEED_RULES, deepspeed, "")]
    assert (".training.globalBatchSize" not in fields) is ok


def test_every_deepspeed_rule_has_its_cel_twin_and_field():
    assert all(rule.cel and rule.cel.startswith("!has(self.framework) || self.framework != 'deepspeed' || ")
               and rule.field for rule in DEEPSPEED_RULES)
