"""The chart's Grafana dashboard: every query is valid PromQL (promtool parses it) and selects only
metrics we export; the job rows select exactly one job."""

from __future__ import annotations

import subprocess

import yaml

from tests.observability import (
    binary,
    dashboard,
    dashboard_queries,
    exported_names,
    metric_names,
    selectors,
)


def test_every_query_is_valid_promql(tmp_path):
    queries = dashboard_queries(namespace="ml", trainingjob="llm")
    assert len(queries) > 20
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query{i}", "expr": expr} for i, (_, expr) in enumerate(queries)]}]}
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    res = subprocess.run([binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(queries)} rules found" in res.stdout


def test_a_broken_query_is_caught(tmp_path):
    """The check above can fail: promtool refuses what Grafana would show as an error."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": [
        {"record": "dashboard:bad", "expr": "sum by (le (rate(phalanx_trainingjob_step[1m]))"}]}]}))
    res = subprocess.run([binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0


def test_queries_name_only_exported_metrics():
    exported = exported_names()
    for where, expr in dashboard_queries():
        names = metric_names(expr)
        assert names, f"{where}: selects no metric: {expr}"
        assert names <= exported, f"{where}: not exported: {names - exported}"


def test_job_panels_select_one_job():
    panels = dashboard()["panels"]
    row = next(i for i, p in enumerate(panels) if p["type"] == "row" and "$trainingjob" in p["title"])
    for panel in panels[row + 1:]:
        for target in panel["targets"]:
            for sel in selectors(target["expr"]):
                assert 'namespace="$namespace"' in sel and 'trainingjob="$trainingjob"' in sel, (panel["title"], sel)


def test_what_the_issue_asks_for_is_on_it():
    titles = {p["title"].lower() for p in dashboard()["panels"]}
    for wanted in ("jobs by phase", "jobs", "waiting to start (and why)", "loss", "tokens/s", "mfu", "step time",
                   "restarts", "checkpoint age"):
        assert wanted in titles, wanted
    names = {v["name"] for v in dashboard()["templating"]["list"]}
    assert {"datasource", "namespace", "trainingjob"} <= names
    assert dashboard()["uid"] == "phalanx-training"
