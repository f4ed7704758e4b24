"""Per-job operator series: status → samples (pure), the collector's exposition, no cardinality leak."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.jobmetrics import FAMILIES, JobMetrics, job_samples, pending_reason

T0 = "2026-03-01T10:00:00Z"
T0_EPOCH = 1772359200.0


def job(name="llm", namespace="ml", status=None, spec=None):
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": T0},
            "spec": spec if spec is not None else {"nodes": 4, "checkpoint": {"volume": {"emptyDir": {}}, "intervalSteps": 50}},
            "status": status or {}}


def cond(type_, status, reason, at=T0):
    return {"type": type_, "status": status, "reason": reason, "lastTransitionTime": at}


def values(samples) -> dict[tuple[str, tuple], float]:
    return {(s.family.name, tuple(v for k, v in s.labels[2:])): s.value for s in samples}


def scrape(collector) -> dict[tuple[str, frozenset], float]:
    reg = CollectorRegistry()
    reg.register(collector)
    text = generate_latest(reg).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


RUNNING = {
    "phase": "Running", "readyNodes": 3, "totalNodes": 4, "step": 120, "totalSteps": 1000, "loss": 2.5,
    "tokensPerSecond": 9000.0, "restarts": 2, "estimatedRemainingSeconds": 880,
    "lastProgressTime": "2026-03-01T10:05:00Z",
    "lastCheckpoint": {"step": 100, "path": "/c/step-100", "time": "2026-03-01T10:04:00Z"},
    "conditions": [cond("Running", "True", "AllNodesRunning"), cond("Schedulable", "True", "Placed")],
}


def test_running_job_every_value_from_status_and_progress():
    v = values(job_samples(job(status=RUNNING), {"loss": 2.4, "tokensPerSecond": 9100.0, "mfu": 0.41, "stepTimeSeconds": 1.5}))
    assert v[("phalanx_trainingjob_status_phase", ("Running",))] == 1
    assert v[("phalanx_trainingjob_status_phase", ("Pending",))] == 0
    assert sum(val for (name, _), val in v.items() if name == "phalanx_trainingjob_status_phase") == 1
    assert v[("phalanx_trainingjob_nodes_ready", ())] == 3 and v[("phalanx_trainingjob_nodes_desired", ())] == 4
    assert v[("phalanx_trainingjob_step", ())] == 120
    assert v[("phalanx_trainingjob_progress_ratio", ())] == 0.12
    assert v[("phalanx_trainingjob_loss", ())] == 2.4  # rank 0's progress wins over the status
    assert v[("phalanx_trainingjob_tokens_per_second", ())] == 9100.0
    assert v[("phalanx_trainingjob_mfu_ratio", ())] == 0.41
    assert v[("phalanx_trainingjob_step_duration_seconds", ())] == 1.5
    assert v[("phalanx_trainingjob_restarts_total", ())] == 2
    assert v[("phalanx_trainingjob_estimated_remaining_seconds", ())] == 880
    assert v[("phalanx_trainingjob_last_progress_timestamp_seconds", ())] == T0_EPOCH + 300
    assert v[("phalanx_trainingjob_last_checkpoint_timestamp_seconds", ())] == T0_EPOCH + 240
    assert v[("phalanx_trainingjob_last_checkpoint_step", ())] == 100
    assert v[("phalanx_trainingjob_checkpoint_interval_steps", ())] == 50
    assert v[("phalanx_trainingjob_status_condition", ("Running", "true", "AllNodesRunning"))] == 1
    assert not any(name == "phalanx_trainingjob_pending_since_timestamp_seconds" for name, _ in v)


def test_without_progress_the_status_values_are_used_and_unknowns_are_absent():
    v = values(job_samples(job(status=RUNNING)))
    assert v[("phalanx_trainingjob_loss", ())] == 2.5 and v[("phalanx_trainingjob_tokens_per_second", ())] == 9000.0
    assert ("phalanx_trainingjob_mfu_ratio", ()) not in v and ("phalanx_trainingjob_step_duration_seconds", ()) not in v


def test_nan_loss_passes_through():
    v = values(job_samples(job(status=RUNNING), {"loss": float("nan")}))
    assert math.isnan(v[("phalanx_trainingjob_loss", ())])


def test_labels_are_namespace_and_trainingjob_never_job():
    for s in job_samples(job(status=RUNNING)):
        keys = [k for k, _ in s.labels]
        assert keys[:2] == ["namespace", "trainingjob"] and "job" not in keys
        assert dict(s.labels)["namespace"] == "ml" and dict(s.labels)["trainingjob"] == "llm"


def test_unschedulable_job_pending_since_creation_with_the_reason():
    status = {"phase": "Pending", "conditions": [cond("Created", "True", "PodsCreated"),
                                                  cond("Schedulable", "False", "Unschedulable", "2026-03-01T10:01:00Z")]}
    v = values(job_samples(job(status=status)))
    assert v[("phalanx_trainingjob_pending_since_timestamp_seconds", ("Unschedulable",))] == T0_EPOCH
    assert v[("phalanx_trainingjob_nodes_ready", ())] == 0 and v[("phalanx_trainingjob_nodes_desired", ())] == 4
    assert ("phalanx_trainingjob_step", ()) not in v


def test_pending_since_restarts_after_the_gang_stopped_or_resumed():
    stopped = {"phase": "Pending", "conditions": [cond("Running", "False", "Restarting", "2026-03-01T11:00:00Z")]}
    assert values(job_samples(job(status=stopped)))[("phalanx_trainingjob_pending_since_timestamp_seconds", ("Pending",))] == T0_EPOCH + 3600
    resumed = {"phase": "Scheduling", "conditions": [cond("Running", "False", "Suspended", "2026-03-01T11:00:00Z"),
                                                      cond("Suspended", "False", "Resumed", "2026-03-01T12:00:00Z"),
                                                      cond("Schedulable", "True", "GatesLifted")]}
    assert values(job_samples(job(status=resumed)))[("phalanx_trainingjob_pending_since_timestamp_seconds", ("Scheduling",))] == T0_EPOCH + 7200


def test_pending_reason_prefers_created_then_schedulable():
    assert pending_reason({"phase": "Pending", "conditions": [cond("Created", "False", "CreateRefused"),
                                                              cond("Schedulable", "Unknown", "GangIncomplete")]}) == "CreateRefused"
    assert pending_reason({"phase": "Pending", "conditions": [cond("Created", "True", "PodsCreated"),
                                                              cond("Schedulable", "Unknown", "GangIncomplete")]}) == "GangIncomplete"
    assert pending_reason({"phase": "Pending"}) == "Pending"


def test_checkpoint_series_only_for_checkpointing_jobs():
    fresh = values(job_samples(job(status={"phase": "Running", "step": 10})))
    assert fresh[("phalanx_trainingjob_last_checkpoint_step", ())] == 0  # none yet: counts from 0
    plain = values(job_samples(job(spec={"nodes": 1}, status={"phase": "Running", "step": 10})))
    assert not any(name.startswith("phalanx_trainingjob_last_checkpoint") or "interval" in name for name, _ in plain)
    final_only = values(job_samples(job(spec={"nodes": 1, "checkpoint": {"volume": {"emptyDir": {}}}})))
    assert ("phalanx_trainingjob_checkpoint_interval_steps", ()) not in final_only  # intervalSteps 0: only at the end


def test_an_empty_status_is_a_pending_job():
    v = values(job_samples(job()))
    assert v[("phalanx_trainingjob_status_phase", ("Pending",))] == 1
    assert v[("phalanx_trainingjob_restarts_total", ())] == 0
    assert v[("phalanx_trainingjob_pending_since_timestamp_seconds", ("Pending",))] == T0_EPOCH


def test_exposition_types_names_and_units():
    jm = JobMetrics()
    jm.observe(job(status=RUNNING), {"mfu": 0.4, "stepTimeSeconds": 1.5})
    reg = CollectorRegistry()
    reg.register(jm)
    text = generate_latest(reg).decode()
    assert "# TYPE phalanx_trainingjob_restarts_total counter" in text
    assert 'phalanx_trainingjob_restarts_total{namespace="ml",trainingjob="llm"} 2.0' in text
    for family in FAMILIES:
        assert family.name.startswith("phalanx_trainingjob_")
        assert family.name.endswith("_total") == (family.type == "counter")
        assert f"# TYPE {family.name} {family.type}" in text


def test_deleted_job_series_are_gone():
    jm = JobMetrics()
    jm.observe(job("a", status=RUNNING))
    jm.observe(job("b", status={"phase": "Pending"}))
    before = scrape(jm)
    assert any(dict(labels).get("trainingjob") == "a" for _, labels in before)
    jm.forget("ml", "a")
    after = scrape(jm)
    assert not any(dict(labels).get("trainingjob") == "a" for _, labels in after)
    assert any(dict(labels).get("trainingjob") == "b" for _, labels in after)
    jm.forget("ml", "b")
    assert scrape(jm) == {}
    assert jm.jobs() == []


def test_a_changed_reason_replaces_the_series():
    jm = JobMetrics()
    jm.observe(job(status={"phase": "Pending", "conditions": [cond("Schedulable", "False", "Unschedulable")]}))
    jm.observe(job(status={"phase": "Scheduling", "conditions": [cond("Schedulable", "True", "GatesLifted")]}))
    reasons = {dict(labels).get("reason") for name, labels in scrape(jm) if name == "phalanx_trainingjob_status_condition"}
    assert reasons == {"GatesLifted"}  # the old reason's series is gone, not left at its last value


def test_garbage_from_the_runtime_is_no_sample_and_never_an_exception():
    v = values(job_samples(job(status=RUNNING), {"loss": "oops", "mfu": [1]}))
    assert v[("phalanx_trainingjob_loss", ())] == 2.5  # the status value instead
    assert ("phalanx_trainingjob_mfu_ratio", ()) not in v
    jm = JobMetrics()
    jm.observe({"metadata": {"name": "x"}, "status": {"conditions": "not a list"}})  # logged, not raised
    assert jm.jobs() == []


def test_role_pods_per_role_and_nothing_for_a_malformed_entry():
    status = {**RUNNING, "roles": [{"name": "worker", "replicas": 4, "ready": 3}, {"name": "ps", "replicas": 2, "ready": 2},
                                   {"replicas": 9}, "junk"]}
    v = values(job_samples(job(status=status)))
    assert v[("phalanx_trainingjob_role_pods_desired", ("ps",))] == 2 and v[("phalanx_trainingjob_role_pods_ready", ("worker",))] == 3
    assert len([k for k in v if k[0] == "phalanx_trainingjob_role_pods_ready"]) == 2
    assert not [k for k in values(job_samples(job(status=RUNNING))) if k[0].startswith("phalanx_trainingjob_role_pods")]


COMMAND_SPEC = {"nodes": 2, "command": ["python", "train.py"], "progress": {"collector": "huggingface"}}


def test_a_command_job_with_progress_has_the_same_series():
    status = {"phase": "Running", "step": 40, "totalSteps": 80, "loss": 1.25, "tokensPerSecond": 500.0,
              "metrics": {"eval_loss": 1.5, "learning_rate": 2e-5}}
    v = values(job_samples(job(spec=COMMAND_SPEC, status=status), {"metrics": {"learning_rate": 1e-5, "grad_norm": 0.5}}))
    assert v[("phalanx_trainingjob_step", ())] == 40 and v[("phalanx_trainingjob_progress_ratio", ())] == 0.5
    assert v[("phalanx_trainingjob_loss", ())] == 1.25 and v[("phalanx_trainingjob_tokens_per_second", ())] == 500
    reported = {labels[0]: value for (name, labels), value in v.items() if name == "phalanx_trainingjob_reported_metric"}
    assert reported == {"eval_loss": 1.5, "learning_rate": 1e-5, "grad_norm": 0.5}  # rank 0's fresher value wins


def test_reported_metrics_are_bounded_and_garbage_is_no_sample():
    status = {"phase": "Running", "metrics": {f"s{i}": i for i in range(30)}}
    live = {"metrics": {**{f"l{i}": i for i in range(30)}, "text": "1", "list": [1]}}
    v = values(job_samples(job(status=status), live))
    names = [labels[0] for (name, labels), _ in v.items() if name == "phalanx_trainingjob_reported_metric"]
    assert len(names) <= 32 and "text" not in names and "list" not in names
    assert values(job_samples(job(status={"metrics": "junk"}), {"metrics": 7})) is not None  # never raises


def test_a_deleted_jobs_reported_metrics_are_gone():
    jm = JobMetrics()
    jm.observe(job("c", spec=COMMAND_SPEC, status={"phase": "Running", "metrics": {"eval_loss": 1.0}}))
    assert any(name == "phalanx_trainingjob_reported_metric" for name, _ in scrape(jm))
    jm.forget("ml", "c")
    assert scrape(jm) == {}
