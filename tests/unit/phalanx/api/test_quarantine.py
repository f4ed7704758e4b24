"""The NodeQuarantine CRD: generated, cluster-scoped, named after its node, bounded."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from phalanx.api.quarantine import (
    MAX_EVIDENCE,
    NodeQuarantineSpec,
    build_quarantine_crd,
    quarantine_crd_yaml,
)

ROOT = Path(__file__).resolve().parents[4]
NAME = "phalanx.dev_nodequarantines.yaml"


def test_the_files_match_the_models():
    for path in (ROOT / "crds" / NAME, ROOT / "charts" / "phalanx" / "crds" / NAME):
        assert path.read_text() == quarantine_crd_yaml(), f"{path} drifted: run `make crds`"


def test_cluster_scoped_with_short_name_and_printer_columns():
    crd = build_quarantine_crd()
    assert crd["metadata"]["name"] == "nodequarantines.phalanx.dev"
    assert crd["spec"]["scope"] == "Cluster" and crd["spec"]["names"]["shortNames"] == ["nq"]
    version = crd["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]][:3] == ["Node", "Reason", "Expires"]
    root = version["schema"]["openAPIV3Schema"]
    assert root["x-kubernetes-validations"] == [{"rule": "self.metadata.name == self.spec.node",
                                                 "message": "metadata.name must be spec.node"}]
    spec = root["properties"]["spec"]
    assert spec["properties"]["reason"]["enum"] == ["Condition", "Taint", "JobEvidence", "Preflight", "Manual"]
    assert spec["properties"]["evidence"]["maxItems"] == MAX_EVIDENCE
    assert set(spec["required"]) == {"node", "reason"}
    yaml.safe_load(quarantine_crd_yaml())


@pytest.mark.parametrize("spec", [
    {"node": "n1"},  # no reason
    {"node": "n1", "reason": "Bored"},
    {"node": "N_1", "reason": "Manual"},
    {"node": "n1", "reason": "Manual", "evidence": [{"category": "x", "time": "2026-01-01T00:00:00Z"}] * (MAX_EVIDENCE + 1)},
    {"node": "n1", "reason": "Manual", "tenant": "x"},
])
def test_the_model_refuses(spec):
    with pytest.raises(ValidationError):
        NodeQuarantineSpec.model_validate(spec)


def test_an_admins_quarantine_needs_no_expiry():
    spec = NodeQuarantineSpec.model_validate({"node": "gpu-7", "reason": "Manual", "message": "bad fan"})
    assert spec.expires_at is None and spec.evidence == []
