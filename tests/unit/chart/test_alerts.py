"""The chart's alert rules, as shipped (values.yaml defaults), under `promtool test rules`: each
alert fires for the job it is about, after its `for:`, and stays quiet for healthy ones."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.observability import alert_rules, binary, exported_names, metric_names, render_rules

JOB = {"namespace": "ml"}
OPERATOR = {"job": "phalanx-operator-metrics", "instance": "op:9090"}


def series(name: str, values: str, **labels: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def firing(alert: str, at: str, *expected: dict) -> dict:
    return {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": labels} for labels in expected]}


def job_alert(trainingjob: str, severity: str, **extra: str) -> dict:
    return {**JOB, "trainingjob": trainingjob, "severity": severity, **extra}


def without_annotations(text: str) -> str:
    """promtool compares annotations too; the behaviour tests leave them to test_annotations_render."""
    doc = yaml.safe_load(text)
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return yaml.safe_dump(doc)


def promtool_test(tmp_path: Path, input_series: list[dict], cases: list[dict], rules: str | None = None) -> None:
    (tmp_path / "rules.yaml").write_text(rules or without_annotations(render_rules()))
    spec = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": input_series, "alert_rule_test": cases}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    res = subprocess.run([binary("promtool"), "test", "rules", "test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_rules_are_valid_and_use_only_exported_metrics(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(render_rules())
    res = subprocess.run([binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    exported = exported_names() | {"up"}
    rules = alert_rules()
    assert {r["alert"] for r in rules} == {
        "PhalanxJobNotProgressing", "PhalanxJobRestartingRepeatedly", "PhalanxJobPendingTooLong",
        "PhalanxJobLossNotFinite", "PhalanxJobCheckpointStale", "PhalanxJobFailed",
        "PhalanxOperatorDown", "PhalanxOperatorReconcileErrors"}
    for rule in rules:
        assert metric_names(rule["expr"]) <= exported, (rule["alert"], metric_names(rule["expr"]) - exported)
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_not_progressing_fires_for_a_running_job_whose_step_stopped(tmp_path):
    promtool_test(tmp_path, [
        series("phalanx_trainingjob_last_progress_timestamp_seconds", "0x40", **JOB, trainingjob="hung"),
        series("phalanx_trainingjob_status_phase", "1x40", **JOB, trainingjob="hung", phase="Running"),
        series("phalanx_trainingjob_last_progress_timestamp_seconds", "0+60x40", **JOB, trainingjob="ok"),
        series("phalanx_trainingjob_status_phase", "1x40", **JOB, trainingjob="ok", phase="Running"),
        series("phalanx_trainingjob_last_progress_timestamp_seconds", "0x40", **JOB, trainingjob="done"),
        series("phalanx_trainingjob_status_phase", "0x40", **JOB, trainingjob="done", phase="Running"),
    ], [
        firing("PhalanxJobNotProgressing", "24m"),  # 20 min without a step since 20m, for: 5m not yet over
        firing("PhalanxJobNotProgressing", "27m", job_alert("hung", "critical")),
    ])


def test_restarting_repeatedly_counts_restarts_in_the_window(tmp_path):
    promtool_test(tmp_path, [
        series("phalanx_trainingjob_restarts_total", "0 1 2 3x30", **JOB, trainingjob="flaky"),
        series("phalanx_trainingjob_restarts_total", "0 0 0 1x30", **JOB, trainingjob="once"),
    ], [
        firing("PhalanxJobRestartingRepeatedly", "4m"),
        firing("PhalanxJobRestartingRepeatedly", "10m", job_alert("flaky", "warning")),
    ])


def test_pending_too_long_names_the_reason(tmp_path):
    promtool_test(tmp_path, [
        series("phalanx_trainingjob_pending_since_timestamp_seconds", "0x50", **JOB, trainingjob="big", reason="Unschedulable"),
        series("phalanx_trainingjob_pending_since_timestamp_seconds", "1800x50", **JOB, trainingjob="new", reason="GangIncomplete"),
    ], [
        firing("PhalanxJobPendingTooLong", "33m"),
        firing("PhalanxJobPendingTooLong", "40m", job_alert("big", "warning", reason="Unschedulable")),
    ])


def test_loss_not_finite_fires_for_nan_and_inf(tmp_path):
    promtool_test(tmp_path, [
        series("phalanx_trainingjob_loss", "2 " + " ".join(["NaN"] * 10), **JOB, trainingjob="nan"),
        series("phalanx_trainingjob_loss", "2 " + " ".join(["Inf"] * 10), **JOB, trainingjob="inf"),
        series("phalanx_trainingjob_loss", "2 " + " ".join(["-Inf"] * 10), **JOB, trainingjob="neginf"),
        series("phalanx_trainingjob_loss", "2.5x10", **JOB, trainingjob="ok"),
    ], [
        firing("PhalanxJobLossNotFinite", "3m"),
        firing("PhalanxJobLossNotFinite", "7m", job_alert("nan", "critical"), job_alert("inf", "critical"),
               job_alert("neginf", "critical")),
    ])


def test_checkpoint_stale_after_n_missed_intervals(tmp_path):
    every_100 = " ".join(f"{k * 100}x9" for k in range(6))  # a checkpoint every 100 steps
    promtool_test(tmp_path, [
        series("phalanx_trainingjob_step", "0+10x60", **JOB, trainingjob="stuck"),
        series("phalanx_trainingjob_last_checkpoint_step", "0x60", **JOB, trainingjob="stuck"),
        series("phalanx_trainingjob_checkpoint_interval_steps", "100x60", **JOB, trainingjob="stuck"),
        series("phalanx_trainingjob_step", "0+10x60", **JOB, trainingjob="ok"),
        series("phalanx_trainingjob_last_checkpoint_step", every_100, **JOB, trainingjob="ok"),
        series("phalanx_trainingjob_checkpoint_interval_steps", "100x60", **JOB, trainingjob="ok"),
    ], [
        firing("PhalanxJobCheckpointStale", "33m"),  # 330 steps > 300 since 31m, for: 5m
        firing("PhalanxJobCheckpointStale", "40m", job_alert("stuck", "warning")),
    ])


def test_job_failed(tmp_path):
    promtool_test(tmp_path, [
        series("phalanx_trainingjob_status_phase", "0 0 1x20", **JOB, trainingjob="bad", phase="Failed"),
        series("phalanx_trainingjob_status_phase", "0x20", **JOB, trainingjob="good", phase="Failed"),
    ], [firing("PhalanxJobFailed", "8m", job_alert("bad", "warning", phase="Failed"))])


def test_operator_down_when_up_is_0(tmp_path):
    promtool_test(tmp_path, [series("up", "1 1 1 0x10", **OPERATOR)], [
        firing("PhalanxOperatorDown", "5m"),
        firing("PhalanxOperatorDown", "9m", {"job": OPERATOR["job"], "severity": "critical"}),
    ])


def test_one_replica_down_is_not_the_operator_down(tmp_path):
    standby = {**OPERATOR, "instance": "op2:9090"}
    promtool_test(tmp_path, [series("up", "1 1 1 0x10", **OPERATOR), series("up", "1x13", **standby)], [
        firing("PhalanxOperatorDown", "9m"),
    ])


def test_operator_down_when_not_scraped_at_all(tmp_path):
    promtool_test(tmp_path, [series("up", "1x10", job="something-else", instance="x:1")], [
        firing("PhalanxOperatorDown", "6m", {"job": OPERATOR["job"], "severity": "critical"}),
    ])


def test_reconcile_errors_rising(tmp_path):
    promtool_test(tmp_path, [
        series("phalanx_reconciles_total", "0+2x30", result="error", **OPERATOR),
        series("phalanx_reconciles_total", "0+1x30", result="error", job="phalanx-operator-metrics", instance="calm:9090"),
    ], [
        firing("PhalanxOperatorReconcileErrors", "4m"),
        firing("PhalanxOperatorReconcileErrors", "16m", {**OPERATOR, "severity": "warning"}),
    ])


def test_annotations_render(tmp_path):
    """Summary and description templates expand (namespace, job, reason, humanized duration)."""
    rules = yaml.safe_load(render_rules())
    pending = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "PhalanxJobPendingTooLong")
    expected = {
        "summary": "TrainingJob ml/big has waited 40m 0s to start: Unschedulable",
        "description": pending["annotations"]["description"].replace("{{ $value | humanizeDuration }}", "40m 0s")
                                                             .replace("{{ $labels.reason }}", "Unschedulable"),
    }
    case = firing("PhalanxJobPendingTooLong", "40m", job_alert("big", "warning", reason="Unschedulable"))
    case["exp_alerts"][0]["exp_annotations"] = expected
    promtool_test(tmp_path, [
        series("phalanx_trainingjob_pending_since_timestamp_seconds", "0x50", **JOB, trainingjob="big", reason="Unschedulable"),
    ], [case], rules=render_rules())


def test_params_reach_the_rules():
    text = render_rules(noProgressSeconds=5, **{"for": "0s"})
    rule = next(r for r in alert_rules(text) if r["alert"] == "PhalanxJobNotProgressing")
    assert "> 5\n" in rule["expr"] and rule["for"] == "0s"
