"""The chart's observability parts: PrometheusRule (the rule file with its params), the Grafana
dashboard ConfigMap, the runtime PodMonitor, the ServiceMonitor keeping per-job labels."""

from __future__ import annotations

import json
import subprocess

import yaml

from tests.integration.test_chart import CHART, by_kind, helm, template
from tests.observability import DASHBOARD_FILE, render_rules

OFF = ("PrometheusRule", "PodMonitor", "ServiceMonitor")


def test_everything_is_off_by_default():
    docs = template()
    assert not [d for d in docs if d["kind"] in OFF]
    assert not [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]


def test_prometheus_rule_is_the_rule_file_with_its_params():
    rule = by_kind(template("prometheusRule.enabled=true", "prometheusRule.labels.release=kps"), "PrometheusRule")[0]
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load(render_rules(operatorSelector='job="rel-operator-metrics"'))
    tuned = by_kind(template("prometheusRule.enabled=true", "prometheusRule.params.pendingSeconds=60",
                             "prometheusRule.params.operatorSelector=job=\"ops\""), "PrometheusRule")[0]
    assert tuned["spec"] == yaml.safe_load(render_rules(pendingSeconds=60, operatorSelector='job="ops"'))


def test_a_missing_param_fails_clearly():
    res = subprocess.run([helm(), "template", "rel", str(CHART), "--set", "prometheusRule.enabled=true",
                          "--set", "prometheusRule.params.pendingSeconds=null"], capture_output=True, text=True)
    assert res.returncode != 0 and "prometheusRule: no value for ${pendingSeconds}" in res.stderr


def test_dashboard_config_map_for_the_grafana_sidecar():
    docs = template("grafanaDashboard.enabled=true", "grafanaDashboard.namespace=monitoring",
                    "grafanaDashboard.annotations.grafana_folder=Training")
    cm = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "rel-operator-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Training"}
    assert json.loads(cm["data"]["phalanx-training.json"]) == json.loads(DASHBOARD_FILE.read_text())


def test_pod_monitor_scrapes_every_training_pod_in_the_watched_namespaces():
    pm = by_kind(template("metrics.podMonitor.enabled=true"), "PodMonitor")[0]
    assert pm["spec"]["selector"] == {"matchExpressions": [{"key": "phalanx.dev/job-name", "operator": "Exists"}]}
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "interval": "30s", "honorLabels": True}]
    scoped = by_kind(template("metrics.podMonitor.enabled=true", "watch.allNamespaces=false",
                              "watch.namespaces={team-a,team-b}"), "PodMonitor")[0]
    assert scoped["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}


def test_service_monitor_keeps_the_jobs_namespace_label():
    sm = by_kind(template("metrics.serviceMonitor.enabled=true"), "ServiceMonitor")[0]
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True


def test_lint_with_everything_on():
    res = subprocess.run([helm(), "lint", str(CHART), "--set", "prometheusRule.enabled=true", "--set",
                          "grafanaDashboard.enabled=true", "--set", "metrics.podMonitor.enabled=true", "--set",
                          "metrics.serviceMonitor.enabled=true"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
