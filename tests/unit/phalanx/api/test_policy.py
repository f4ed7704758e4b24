"""The cluster policy's model: the tables it keeps against Kubernetes, its safe defaults, which
namespace gets which rules, and the scheduler a backend implies."""

from __future__ import annotations

import pytest

from phalanx import constants
from phalanx.api.policy import (
    CONTROL_PLANE_KEYS,
    NODE_CONDITION_KEYS,
    SAFE_BACKENDS,
    SAFE_PROJECTED_SOURCES,
    SAFE_VOLUME_TYPES,
    ClusterPolicy,
    NamespacePolicy,
    PolicyRules,
    effective_scheduler_name,
)
from phalanx.api.types import GangBackend


def _core_v1() -> dict:
    """The core/v1 OpenAPI of the Kubernetes version hack/cluster/go.mod pins (from the Go module cache)."""
    import json
    import os
    import re
    import subprocess
    from pathlib import Path

    version = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (Path(__file__).parents[4] / "hack/cluster/go.mod").read_text(), re.M).group(1)
    try:
        cache = os.environ.get("GOMODCACHE") or subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError:
        cache = ""
    spec = Path(cache or Path.home() / "go/pkg/mod") / f"k8s.io/kubernetes@{version}/api/openapi-spec/v3/api__v1_openapi.json"
    if not spec.exists():
        pytest.skip(f"{spec} not in the Go module cache")
    return json.loads(spec.read_text())["components"]["schemas"]


def _ref(prop: dict) -> str | None:
    ref = prop.get("$ref") or (prop.get("allOf") or [{}])[0].get("$ref")
    return ref.rsplit(".", 1)[-1] if ref else None


@pytest.mark.built_last
@pytest.mark.usefixtures("cluster_build")
def test_volume_tables_match_core_v1():
    """Every VolumeSource member, every field of one that names a Secret, every projected source."""
    from phalanx.api.kubetypes import VOLUME_SOURCES
    from phalanx.api.policy import PROJECTED_SOURCES, VOLUME_SECRET_REFS

    core = _core_v1()
    volume = core["io.k8s.api.core.v1.Volume"]["properties"]
    assert sorted(VOLUME_SOURCES) == sorted(k for k in volume if k != "name")
    refs = {}
    for source in VOLUME_SOURCES:
        fields = core[f"io.k8s.api.core.v1.{_ref(volume[source])}"]["properties"]
        for name, prop in fields.items():
            # a LocalObjectReference or a name called secret*: a Secret (cephfs.secretFile is a path on the node)
            if source != "secret" and "secret" in name.lower() and name != "secretFile":
                refs[source] = name
                assert _ref(prop) == "LocalObjectReference" or prop.get("type") == "string", (source, name)
    assert refs == VOLUME_SECRET_REFS
    assert sorted(PROJECTED_SOURCES) == sorted(core["io.k8s.api.core.v1.VolumeProjection"]["properties"])


@pytest.mark.parametrize(("scheduler_name", "backend", "expected"), [
    (None, "native", None),  # kube-scheduler
    (None, "kueue", None),
    (None, "workload", None),
    (None, "volcano", constants.VOLCANO_SCHEDULER_NAME),
    (None, "coscheduling", constants.COSCHEDULING_SCHEDULER_NAME),
    ("custom", "native", "custom"),
    ("custom", "volcano", "custom"),  # the job's own name wins over its backend's
])
def test_effective_scheduler_name(scheduler_name, backend, expected):
    assert effective_scheduler_name(scheduler_name, backend) == expected


def test_every_backend_has_a_known_scheduler():
    for backend in GangBackend:
        effective_scheduler_name(None, str(backend))  # raises for a value that is no GangBackend
    with pytest.raises(ValueError):
        effective_scheduler_name(None, "slurm")


def test_the_defaults_are_for_tenants_who_do_not_trust_each_other():
    rules = PolicyRules()
    assert rules.allowed_volume_types == SAFE_VOLUME_TYPES and "hostPath" not in rules.allowed_volume_types
    assert not rules.allow_secrets and not rules.allow_keyless_tolerations
    assert rules.allowed_projected_sources == SAFE_PROJECTED_SOURCES
    assert "serviceAccountToken" not in rules.allowed_projected_sources
    assert rules.allowed_service_accounts == [] and rules.allowed_scheduler_names == []
    assert set(rules.allowed_backends) == set(SAFE_BACKENDS)
    assert {GangBackend.VOLCANO, GangBackend.COSCHEDULING}.isdisjoint(rules.allowed_backends)
    assert rules.forbidden_node_selector_keys == CONTROL_PLANE_KEYS
    assert rules.forbidden_toleration_keys == CONTROL_PLANE_KEYS + NODE_CONDITION_KEYS


def test_each_policy_gets_its_own_lists():
    """The defaults are copies: one namespace's rules edited in place leave the others' alone."""
    first, second = PolicyRules(), PolicyRules()
    first.allowed_volume_types.append("hostPath")
    first.forbidden_toleration_keys.clear()
    assert "hostPath" not in second.allowed_volume_types and "hostPath" not in SAFE_VOLUME_TYPES
    assert second.forbidden_toleration_keys == CONTROL_PLANE_KEYS + NODE_CONDITION_KEYS


ML = NamespacePolicy(match_labels={"team": "ml"}, rules=PolicyRules(max_nodes=8))
ML_GPU = NamespacePolicy(match_labels={"team": "ml", "gpu": "yes"}, rules=PolicyRules(max_nodes=64))
ANY = NamespacePolicy(match_labels={}, rules=PolicyRules(max_nodes=2))


@pytest.mark.parametrize(("namespaces", "labels", "max_nodes"), [
    ([], {"team": "ml"}, 1024),  # the default
    ([ML], {"team": "ml"}, 8),
    ([ML], {"team": "web"}, 1024),
    ([ML], None, 1024),
    ([ML_GPU], {"team": "ml"}, 1024),  # every pair must match
    ([ML_GPU], {"team": "ml", "gpu": "yes", "zone": "a"}, 64),
    ([ML, ML_GPU], {"team": "ml", "gpu": "yes"}, 8),  # the first match wins
    ([ML_GPU, ML], {"team": "ml", "gpu": "yes"}, 64),
    ([ANY, ML], {"team": "ml"}, 2),  # no labels to match: every namespace
    ([ANY], None, 2),
])
def test_for_namespace_first_match_wins(namespaces, labels, max_nodes):
    assert ClusterPolicy(namespaces=namespaces).for_namespace(labels).max_nodes == max_nodes
