"""The gang backends' interface (phalanx/backends/base.py Backend) and registry: one Backend per
GangBackend member; what each validates (its render's errors) and where the operator reads its
verdict on the gang; the discovered Workload API versions carried by OperatorConfig; Schedulable."""

from __future__ import annotations

import pytest

from phalanx.api.config import OperatorConfig
from phalanx.api.types import GangBackend
from phalanx.backends import BACKENDS, Backend, backend_for, backend_named, render_backend
from phalanx.decision import Schedulable
from tests.unit.phalanx.backends.fixtures import job


def test_every_backend_has_its_module():
    assert set(BACKENDS) == set(GangBackend)
    assert all(isinstance(b, Backend) and b.name == name for name, b in BACKENDS.items())
    for name in GangBackend:
        j = job(scheduling={"backend": name.value, "queue": "q"})
        assert backend_for(j.spec) is backend_named(name.value) is BACKENDS[name]
        assert render_backend(j) == BACKENDS[name].render(j)


def test_a_raw_spec_without_a_backend_is_native():
    assert backend_named(None) is BACKENDS[GangBackend.NATIVE]
    with pytest.raises(ValueError):
        backend_named("slurm")


# (backend, Workload API versions served (None: not discovered), reads the PodGroup, reads Kueue's Workload)
OBSERVES = [
    (GangBackend.WORKLOAD, None, True, False),  # not discovered: the newest API, v1alpha2
    (GangBackend.WORKLOAD, ("v1alpha1", "v1alpha2"), True, False),
    (GangBackend.WORKLOAD, ("v1alpha1",), False, False),  # v1alpha1's Workload has no status
    (GangBackend.WORKLOAD, (), False, False),
    (GangBackend.KUEUE, None, False, True),
    (GangBackend.NATIVE, ("v1alpha2",), False, False),
    (GangBackend.VOLCANO, ("v1alpha2",), False, False),
    (GangBackend.COSCHEDULING, ("v1alpha2",), False, False),
]


@pytest.mark.parametrize("name,served,pod_group,kueue_workload", OBSERVES)
def test_where_the_verdict_on_the_gang_is_read(name, served, pod_group, kueue_workload):
    backend = BACKENDS[name]
    assert backend.reads_pod_group(served) is pod_group
    assert backend.reads_kueue_workload is kueue_workload


def test_only_native_admits_the_gang_itself():
    assert [name for name, b in BACKENDS.items() if b.admits_itself] == [GangBackend.NATIVE]


@pytest.mark.parametrize("scheduling,kwargs,error", [
    ({"backend": "kueue"}, {}, "scheduling.queue: backend kueue needs a LocalQueue name"),
    ({"backend": "workload"}, {"workload_api_versions": ()}, "scheduling.backend: workload needs the Kubernetes Workload API"),
    ({"backend": "workload", "topology": {"required": "block"}}, {"workload_api_versions": ("v1alpha1",)},
     "scheduling.topology.required: the cluster's Workload API (scheduling.k8s.io/v1alpha1) has no topology constraints"),
])
def test_validate_is_what_the_render_refuses(scheduling, kwargs, error):
    j = job(scheduling=scheduling)
    errors = backend_for(j.spec).validate(j, **kwargs)
    assert errors == render_backend(j, **kwargs).errors and errors[0].startswith(error)


@pytest.mark.parametrize("name", list(GangBackend))
def test_validate_passes_a_job_the_backend_can_render(name):
    j = job(scheduling={"backend": name.value, "queue": "q"})
    assert BACKENDS[name].validate(j, workload_api_versions=("v1alpha2",)) == []


def test_the_operator_config_carries_the_discovered_workload_api():
    config = OperatorConfig()
    assert config.workload_api_versions is None
    found = config.with_workload_api(["v1alpha1"])
    assert found.workload_api_versions == ("v1alpha1",) and config.workload_api_versions is None
    assert found.with_workload_api(None).workload_api_versions is None
    assert found.topology == config.topology
    assert "workloadApiVersions" not in str(OperatorConfig.model_json_schema(by_alias=True))  # not configuration
    wl = job(scheduling={"backend": "workload"})
    assert render_backend(wl, workload_api_versions=found.workload_api_versions).objects[0]["apiVersion"] \
        == "scheduling.k8s.io/v1alpha1"


@pytest.mark.parametrize("status,true", [(True, True), ("True", True), (False, False), ("False", False),
                                         ("Unknown", False)])
def test_schedulable_is_true_as_a_condition_is(status, true):
    assert Schedulable(status, "R", "m").is_true is true


def test_render_and_validate_take_the_workload_api_from_the_config():
    from phalanx.render.job import render_children
    from phalanx.validate import validate_spec

    j = job(scheduling={"backend": "workload"})
    v1alpha1 = OperatorConfig().with_workload_api(["v1alpha1"])
    assert {c["apiVersion"] for c in render_children(j, v1alpha1) if c["kind"] == "Workload"} == {"scheduling.k8s.io/v1alpha1"}
    assert {c["apiVersion"] for c in render_children(j) if c["kind"] == "Workload"} == {"scheduling.k8s.io/v1alpha2"}
    refused = [p.message for p in validate_spec(j.spec, OperatorConfig().with_workload_api([]))]
    assert any("workload needs the Kubernetes Workload API" in m for m in refused)
    assert not any("Workload API" in p.message for p in validate_spec(j.spec, OperatorConfig()))
