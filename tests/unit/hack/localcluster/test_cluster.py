"""LocalCluster feature sets: the flags each component gets (pure; no cluster)."""

import pytest

from localcluster import LocalCluster
from localcluster.cluster import ClusterError, feature_args


def test_default_cluster_has_no_feature_flags():
    assert feature_args([]) == ([], [])
    assert LocalCluster(work_dir="/nonexistent").features == []


def test_workload_feature_set():
    gates, runtime = feature_args(["workload"])
    assert gates == ["--feature-gates=GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true"]
    assert runtime == ["--runtime-config=scheduling.k8s.io/v1alpha2=true"]
    assert feature_args(["workload", "workload"]) == (gates, runtime)
    assert LocalCluster(work_dir="/nonexistent", features=["workload"])._gate_args() == gates


def test_unknown_feature_set_is_refused_before_start():
    with pytest.raises(ClusterError, match="unknown feature set 'gpu-magic'"):
        LocalCluster(work_dir="/nonexistent", features=["gpu-magic"])
