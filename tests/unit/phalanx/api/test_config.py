"""The operator config: network profiles' extra resources, topology levels and what discovery
adds to a config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from phalanx import constants
from phalanx.api.config import (
    NetworkProfile,
    OperatorConfig,
    TopologyConfig,
    TopologyLevel,
    default_levels,
    levels_of,
)


@pytest.mark.parametrize(("profile", "extra"), [
    ({}, {}),
    ({"fabric": "infiniband"}, {}),
    ({"fabric": "infiniband", "rdmaResource": "rdma/ib", "rdmaCount": 2}, {"rdma/ib": 2}),
    ({"fabric": "efa"}, {constants.RESOURCE_EFA: 1}),  # the EFA adapter by default on EFA
    ({"fabric": "efa", "rdmaCount": 4}, {constants.RESOURCE_EFA: 4}),
    ({"fabric": "efa", "rdmaResource": "vpc.amazonaws.com/other"}, {"vpc.amazonaws.com/other": 1}),
    ({"fabric": "roce", "rdmaResource": "rdma/roce"}, {"rdma/roce": 1}),
])
def test_extra_resources_of_a_profile(profile, extra):
    assert NetworkProfile.model_validate(profile).extra_resources() == extra


@pytest.mark.parametrize("profile", [{"fabric": "myrinet"}, {"rdmaCount": 0}, {"crossNic": 3}, {"topoFile": {"path": "t.xml"}}])
def test_bad_profiles_are_refused(profile):
    with pytest.raises(ValidationError):
        NetworkProfile.model_validate(profile)


def test_default_levels_are_coarse_to_fine_with_hostname_last():
    levels = default_levels()
    assert [level.name for level in levels] == ["block", "subblock", "hostname"]
    assert levels[-1].label == "kubernetes.io/hostname"
    assert [level.name for level in TopologyConfig().resolved_levels] == ["block", "subblock", "hostname"]


RACK = TopologyLevel(name="rack", label="example.com/rack")


@pytest.mark.parametrize(("topology", "names"), [
    (None, ["block", "subblock", "hostname"]),
    (TopologyConfig(levels=[RACK]), ["rack"]),
    ([RACK], ["rack"]),
    ((RACK,), ["rack"]),
    ([], []),
])
def test_levels_of(topology, names):
    levels = levels_of(topology)
    assert isinstance(levels, list) and [level.name for level in levels] == names


def test_levels_of_a_config_are_a_copy():
    config = TopologyConfig(levels=[RACK])
    levels_of(config).append(RACK)
    assert len(config.levels) == 1


@pytest.mark.parametrize(("versions", "found"), [
    (None, None),
    ([], ()),
    (["v1alpha1", "v1alpha2"], ("v1alpha1", "v1alpha2")),
    (iter(["v1alpha2"]), ("v1alpha2",)),
])
def test_with_workload_api_records_discovery_on_a_copy(versions, found):
    config = OperatorConfig()
    discovered = config.with_workload_api(versions)
    assert discovered.workload_api_versions == found
    assert config.workload_api_versions is None  # the original is unchanged
    assert discovered.model_dump() == config.model_dump()  # not configuration: not on the wire


def test_the_default_config_has_the_default_profile():
    config = OperatorConfig.model_validate({})
    assert list(config.network_profiles) == ["default"] and config.default_shm_size == "2Gi"
    with pytest.raises(ValidationError):
        OperatorConfig.model_validate({"defaultShmSize": "2GB"})
