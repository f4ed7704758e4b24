"""render.networkpolicy: the job's NetworkPolicy (ingress from the gang, the operator, the scraper)."""

from __future__ import annotations

import copy

import pytest

from phalanx import constants
from phalanx.api.config import NetworkPolicyConfig, OperatorConfig
from phalanx.render.networkpolicy import build_network_policy
from phalanx.validate import parse_job
from tests.conftest import MINIMAL
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


@pytest.mark.parametrize("config,scraper", [
    ({}, None),  # no scraper configured: no rule for it
    ({"scraper_pod_labels": {"app": "prometheus"}}, [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]),
    ({"scraper_namespace_labels": {"ns": "mon"}}, [{"namespaceSelector": {"matchLabels": {"ns": "mon"}}}]),
    ({"scraper_namespace_labels": {}}, [{"namespaceSelector": {"matchLabels": {}}}]),  # every namespace's pods
])
def test_the_scraper_rule_only_when_a_scraper_is_named(config, scraper):
    policy = policy_for(**config)
    rules = policy["spec"]["ingress"]
    assert len(rules) == (2 if scraper is None else 3)
    if scraper is not None:
        assert rules[2]["from"] == scraper and [p["port"] for p in rules[2]["ports"]] == [constants.PORT_NAME_METRICS]


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
