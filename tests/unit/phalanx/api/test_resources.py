"""Per-pod resources: quantities, and which names ``extra`` may hold."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from phalanx import constants
from phalanx.api.resources import Resources
from phalanx.api.rules import broken


@pytest.mark.parametrize(("extra", "broken_messages"), [
    ({}, []),
    ({"rdma/rdma_shared_device_a": 1}, []),
    ({"hugepages-2Mi": "1Gi", "ephemeral-storage": "10Gi"}, []),
    ({"cpu": 1}, ["extended resources"]),  # cpu has its own field
    ({"Vendor.com/x": 1}, ["extended resources"]),
    ({constants.RESOURCE_GPU: 8}, ["resources.gpus"]),  # an extended resource name, but GPUs have their field
])
def test_extra_resource_names(extra, broken_messages):
    found = list(broken(Resources.checks, Resources(extra=extra), "spec.resources"))
    assert [field for field, _, _ in found] == ["spec.resources.extra"] * len(broken_messages)
    assert all(words in message for (_, message, _), words in zip(found, broken_messages, strict=True))


def test_only_the_gpu_rule_reaches_the_api_server():
    """A regex over map keys is beyond CEL's cost budget: the name rule is the operator's."""
    assert [rule.cel is not None for rule in Resources.checks] == [False, True]


@pytest.mark.parametrize("fields", [{"gpus": -1}, {"gpus": 65}, {"cpu": "8 cores"}, {"memory": "64GB"}, {"extra": {"a/b": -1}}])
def test_bad_amounts_are_refused(fields):
    with pytest.raises(ValidationError):
        Resources.model_validate(fields)


def test_no_resources_by_default():
    assert Resources().model_dump() == {"gpus": 0, "cpu": None, "memory": None, "extra": {}}
