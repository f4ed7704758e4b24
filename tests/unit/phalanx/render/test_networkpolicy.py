"""render.networkpolicy: the job's NetworkPolicy (ingress from the gang, the operator, the scraper),
and who it lets in on which port under Kubernetes' peer semantics."""

from __future__ import annotations

import copy

import pytest

from phalanx import constants
from phalanx.api.config import DEFAULT_SCRAPER_POD_LABELS, NetworkPolicyConfig, OperatorConfig
from phalanx.render.networkpolicy import build_network_policy
from phalanx.validate import parse_job
from tests.conftest import MINIMAL, ROOT
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


def policy_for(**config):
    return build_network_policy(parse_job(copy.deepcopy(MINIMAL)), NetworkPolicyConfig(**config))


def peers(policy):
    return [rule["from"] for rule in policy["spec"]["ingress"]]


PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}  # what prometheus-operator labels its Prometheus pods
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}


@pytest.mark.parametrize("config,scraper", [
    # the default: Prometheus pods in any namespace
    ({}, [{"namespaceSelector": {"matchLabels": {}}, "podSelector": {"matchLabels": PROMETHEUS}}]),
    # pinned to the monitoring namespace
    ({"scraper_namespace_labels": MONITORING},
     [{"namespaceSelector": {"matchLabels": MONITORING}, "podSelector": {"matchLabels": PROMETHEUS}}]),
    # every pod of the monitoring namespace
    ({"scraper_namespace_labels": MONITORING, "scraper_pod_labels": None}, [{"namespaceSelector": {"matchLabels": MONITORING}}]),
    # namespace labels null: the job's own namespace (a peer without namespaceSelector)
    ({"scraper_namespace_labels": None}, [{"podSelector": {"matchLabels": PROMETHEUS}}]),
    # another scraper's labels
    ({"scraper_pod_labels": {"app.kubernetes.io/name": "vmagent"}},
     [{"namespaceSelector": {"matchLabels": {}}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "vmagent"}}}]),
    # both null: no scraper at all
    ({"scraper_namespace_labels": None, "scraper_pod_labels": None}, None),
])
def test_the_scraper_rule(config, scraper):
    rules = policy_for(**config)["spec"]["ingress"]
    assert len(rules) == (2 if scraper is None else 3)
    if scraper is not None:
        assert rules[2]["from"] == scraper and rules[2]["ports"] == [{"protocol": "TCP", "port": constants.PORT_NAME_METRICS}]


def admits(policy: dict, job_ns: str, client_ns: str, client_labels: dict, port: str) -> bool:
    """Would ``policy`` (in ``job_ns``) let a pod of ``client_ns`` with ``client_labels`` reach
    ``port`` of the pods it selects — Kubernetes' NetworkPolicy ingress semantics, for the
    matchLabels peers the renderer writes (a namespace carries its kubernetes.io/metadata.name)."""
    def match(selector, labels):
        return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())

    def peer_ok(peer):
        ns = {"kubernetes.io/metadata.name": client_ns}
        in_ns = match(peer["namespaceSelector"], ns) if "namespaceSelector" in peer else client_ns == job_ns
        return in_ns and ("podSelector" not in peer or match(peer["podSelector"], client_labels))

    return any((not rule.get("ports") or any(p["port"] == port for p in rule["ports"]))
               and ("from" not in rule or any(peer_ok(peer) for peer in rule["from"]))
               for rule in policy["spec"]["ingress"])


OPERATOR = {"app.kubernetes.io/name": "phalanx-operator"}
GANG = {constants.LABEL_JOB_NAME: "job"}
CHART = {"operator_namespace_labels": {"kubernetes.io/metadata.name": "phalanx-system"}}  # as the chart's ConfigMap sets it


@pytest.mark.parametrize("config,client_ns,labels,open_ports", [
    # the defaults (the chart's too): Prometheus pods anywhere reach the metrics port, nothing else
    (CHART, "monitoring", PROMETHEUS, {"metrics"}),
    (CHART, "kube-prometheus-stack", PROMETHEUS | {"prometheus": "k8s"}, {"metrics"}),
    (CHART, "team", PROMETHEUS, {"metrics"}),
    (CHART, "monitoring", {"app.kubernetes.io/name": "grafana"}, set()),
    (CHART, "monitoring", {}, set()),
    (CHART, "phalanx-system", OPERATOR, {"progress", "metrics"}),
    (CHART, "team", OPERATOR, set()),  # the operator's labels outside its namespace
    (CHART, "team", GANG, {"rendezvous", "progress", "metrics"}),
    (CHART, "other", GANG, set()),  # a same-named job of another namespace
    # pinned to the monitoring namespace: the label alone no longer lets a tenant's pod in
    (CHART | {"scraper_namespace_labels": MONITORING}, "monitoring", PROMETHEUS, {"metrics"}),
    (CHART | {"scraper_namespace_labels": MONITORING}, "team", PROMETHEUS, set()),
    # no scraper
    (CHART | {"scraper_namespace_labels": None, "scraper_pod_labels": None}, "monitoring", PROMETHEUS, set()),
])
def test_who_reaches_which_port(config, client_ns, labels, open_ports):
    policy = policy_for(**config)
    assert {port for port in ("rendezvous", "progress", "metrics")
            if admits(policy, "team", client_ns, labels, port)} == open_ports


def test_the_charts_defaults_are_the_operators():
    """values.yaml's networkPolicy scraper selectors, as the chart's ConfigMap passes them on,
    equal NetworkPolicyConfig's defaults: the same policy with or without the chart."""
    import yaml

    values = yaml.safe_load((ROOT / "charts" / "phalanx" / "values.yaml").read_text())["networkPolicy"]
    from_chart = NetworkPolicyConfig.model_validate({k: values[k] for k in ("scraperNamespaceLabels", "scraperPodLabels")})
    default = NetworkPolicyConfig()
    assert (from_chart.scraper_namespace_labels, from_chart.scraper_pod_labels) == \
        (default.scraper_namespace_labels, default.scraper_pod_labels) == ({}, DEFAULT_SCRAPER_POD_LABELS)
    assert values["enabled"] is default.enabled is True


def test_the_operator_peer_follows_the_config():
    default = policy_for()
    assert peers(default)[1] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "phalanx-operator"}}}]
    by_namespace = policy_for(operator_namespace_labels={"ns": "ops"}, operator_pod_labels=None)
    assert peers(by_namespace)[1] == [{"namespaceSelector": {"matchLabels": {"ns": "ops"}}}]
    rule = by_namespace["spec"]["ingress"][1]
    assert rule["ports"] == [{"protocol": "TCP", "port": constants.PORT_NAME_PROGRESS}, {"protocol": "TCP", "port": constants.PORT_NAME_METRICS}]


def test_the_policy_is_the_jobs_own():
    policy = policy_for()
    assert policy["metadata"]["name"] == "job-gang"
    assert policy["metadata"]["labels"][constants.LABEL_COMPONENT] == constants.COMPONENT_NETWORK
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_operator_selectors_both_left_out_admit_the_operator_from_anywhere():
    """NetworkPolicyConfig: "A selector left out matches everything on that side (both out: from anywhere)"."""
    policy = policy_for(operator_namespace_labels=None, operator_pod_labels=None)
    assert all(peer for rule in policy["spec"]["ingress"] for peer in rule.get("from", [{"any": "peer"}]))
    assert any("from" not in rule and {p["port"] for p in rule["ports"]} == {"progress", "metrics"}
               for rule in policy["spec"]["ingress"])
