"""render.networkpolicy: the job's NetworkPolicy (ingress from the gang, the operator, the scraper)."""

from __future__ import annotations

from phalanx import constants
from phalanx.api.config import OperatorConfig
from tests.unit.phalanx.render.test_job import _render


def test_network_policy_admits_the_gang_the_operator_and_the_scraper(job_obj):
    from phalanx.api.config import NetworkPolicyConfig

    config = OperatorConfig(network_policy=NetworkPolicyConfig(
        operator_namespace_labels={"kubernetes.io/metadata.name": "phalanx-system"},
        scraper_namespace_labels={"kubernetes.io/metadata.name": "monitoring"}, scraper_pod_labels={"app": "prometheus"}))
    policy = next(c for c in _render(job_obj, config=config) if c["kind"] == "NetworkPolicy")
    gang = {"matchLabels": {constants.LABEL_JOB_NAME: "job"}}
    assert policy["spec"]["podSelector"] == gang and policy["spec"]["policyTypes"] == ["Ingress"]
    own, operator, scraper = policy["spec"]["ingress"]
    assert own == {"from": [{"podSelector": gang}]}  # every port: rendezvous and the collectives' own
    assert operator["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "phalanx-system"}},
                                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "phalanx-operator"}}}]
    assert [p["port"] for p in operator["ports"]] == ["progress", "metrics"]
    assert [p["port"] for p in scraper["ports"]] == ["metrics"]
    pod = next(c for c in _render(job_obj, config=config) if c["kind"] == "Pod")
    assert {"progress", "metrics"} <= {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
