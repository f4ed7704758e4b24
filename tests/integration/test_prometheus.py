"""Proven on a real Prometheus (Debian's 2.42 server): it scrapes the operator (per-job series of
jobs on the control plane) and a training run's runtime metrics (`phalanx local` of the same job,
whose rank 0 serves the progress the operator polls); every dashboard query and every alert
expression returns series; alerts fire for the jobs made to hang, restart, wait, fail; a deleted
job's series are gone. The alert rules are the shipped file with short test parameters."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from phalanx.constants import PROGRESS_PORT
from tests.integration.harness import (
    GROUP,
    PLURAL,
    VERSION,
    free_port,
    http_ready,
    job_manifest,
    wait_for,
)
from tests.observability import alert_rules, binary, dashboard_queries, render_rules, selectors

OPERATOR_JOB, RUNTIME_JOB, DEAD_JOB = "phalanx-operator-metrics", "phalanx-runtime", "phalanx-dead"
TEST_PARAMS = {  # the shipped rules, made quick (the shipped defaults are tested by test_alerts)
    "for": "0s", "noProgressSeconds": 30, "restartWindow": "5m", "restartThreshold": 1, "pendingSeconds": 3,
    "checkpointMissedIntervals": 0, "reconcileErrorWindow": "1m", "reconcileErrorThreshold": -1,
    "operatorSelector": f'job="{DEAD_JOB}"',  # a target that is down, so PhalanxOperatorDown can fire
}
TRAINING = "demo"  # trained for real by `phalanx local`; the others only exist on kwok nodes


class Prometheus:
    def __init__(self, work: Path, targets: dict[str, str], rules: str):
        self.work, self.port = work, free_port()
        (work / "rules.yaml").write_text(rules)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": ["rules.yaml"],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in targets.items()],
        }
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = work / "prometheus.log"
        self.proc = subprocess.Popen(
            [binary("prometheus"), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self.ready, 60, "prometheus /-/ready")

    def ready(self) -> bool:
        return http_ready(self.proc, f"http://127.0.0.1:{self.port}/-/ready",
                          lambda: f"prometheus exited:\n{self.log.read_text()[-3000:]}")

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def firing(self) -> set[tuple[str, str]]:
        return {(a["labels"]["alertname"], a["labels"].get("trainingjob", "")) for a in self.api("alerts")["alerts"]
                if a["state"] == "firing"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)


def port_free(port: int) -> bool:
    """Can rank 0's progress server bind it (as it does: SO_REUSEADDR, so TIME_WAIT is fine)?"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def demo_job(namespace: str) -> dict:
    """A small cousin of examples/cpu-3d-demo.yaml (2 CPU processes: a busy 2-core CI machine also
    runs the control plane), checkpointing every 20 steps; long enough to outlive the test."""
    obj = job_manifest(TRAINING, nodes=1, procs=2, gpus=0,
                       model={"preset": "debug"}, data={"source": "corpus", "seqLen": 64},
                       training={"steps": 100000, "globalBatchSize": 8, "lr": 0.003, "precision": "fp32"},
                       checkpoint={"volume": {"emptyDir": {}}, "intervalSteps": 20})
    obj["metadata"]["namespace"] = namespace
    return obj


@pytest.fixture(scope="module")
def scene(cluster, operator, tmp_path_factory):
    """Jobs in every state the alerts are about, a real training run, and Prometheus on both."""
    if not port_free(PROGRESS_PORT):
        pytest.skip(f"port {PROGRESS_PORT} is taken: the operator polls rank 0's progress there")
    work = tmp_path_factory.mktemp("prometheus")
    ns = f"prom-{os.getpid() % 100000}"
    with cluster.api(pool_size=8) as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": ns}})
        wait_for(lambda: _exists(core.read_namespaced_service_account, "default", ns), 60, "default service account")

        def create(obj):
            obj = {**obj, "metadata": {**obj["metadata"], "namespace": ns}}
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, obj)

        runtime_port, dead_port = free_port(), free_port()
        prom = Prometheus(work, {OPERATOR_JOB: f"127.0.0.1:{operator.metrics_port}",
                                 RUNTIME_JOB: f"127.0.0.1:{runtime_port}", DEAD_JOB: f"127.0.0.1:{dead_port}"},
                          render_rules(**TEST_PARAMS))
        create(job_manifest("hung", nodes=1, procs=1, gpus=1))  # Running, never a step: a hang
        create(job_manifest("flaky", nodes=1, procs=1, gpus=1,  # the operator restarts it on each hang
                            failurePolicy={"backoffSeconds": 1, "hangTimeoutSeconds": 3, "maxRestarts": 50}))
        create(job_manifest("big", nodes=1, procs=1, gpus=64))  # no node has 64 GPUs: waits forever
        create(job_manifest("invalid", nodes=1, procs=8, parallelism={"tensor": 8}, training={"globalBatchSize": 1}))
        demo = demo_job(ns)
        create(demo)
        try:
            pod = wait_for(lambda: _rank0_running(core, ns, TRAINING), 120, "the demo job's pod Running")
        except AssertionError as exc:
            status = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, TRAINING).get("status")
            raise AssertionError(f"{exc}\nstatus: {status}\noperator log:\n{operator.tail(30)}") from None
        # The kwok pod's IP goes nowhere: point it at this machine, where rank 0 of the real run listens.
        core.patch_namespaced_pod_status(pod, ns, [{"op": "replace", "path": "/status/podIP", "value": "127.0.0.1"},
                                                   {"op": "replace", "path": "/status/podIPs", "value": [{"ip": "127.0.0.1"}]}])
        (work / "demo.yaml").write_text(yaml.safe_dump(demo))
        ckpt = work / "checkpoints"
        run_log = work / "run.log"
        run = subprocess.Popen(
            [sys.executable, "-m", "phalanx", "local", str(work / "demo.yaml"), f"--checkpoint-dir={ckpt}"],
            env={**os.environ, "PHALANX_PROGRESS_PORT": str(PROGRESS_PORT), "PHALANX_METRICS_PORT": str(runtime_port)},
            stdout=run_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield {"prom": prom, "ns": ns, "core": core, "custom": custom, "operator": operator, "run": run,
                   "run_log": run_log, "ckpt": ckpt, "work": work}
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGTERM)
                try:
                    run.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(run.pid, signal.SIGKILL)
            prom.stop()
            core.delete_namespace(ns)


def _exists(read, *args) -> bool:
    try:
        read(*args)
        return True
    except client.ApiException:
        return False


def _rank0_running(core, ns: str, job: str) -> str | None:
    pods = core.list_namespaced_pod(ns, label_selector=f"phalanx.dev/job-name={job},phalanx.dev/node-rank=0").items
    return next((p.metadata.name for p in pods if p.status.phase == "Running" and p.status.pod_ip), None)


def _run_alive(scene) -> None:
    if scene["run"].poll() is not None:
        raise AssertionError(f"the training run exited {scene['run'].returncode}:\n{scene['run_log'].read_text()[-3000:]}")


def test_every_dashboard_query_returns_series_for_the_job(scene):
    prom = scene["prom"]
    queries = dashboard_queries(namespace=scene["ns"], trainingjob=TRAINING)

    def empty():
        _run_alive(scene)
        return [f"{where}: {expr}" for where, expr in queries if not prom.query(expr)]

    missing = empty()
    deadline = time.monotonic() + 240
    while missing and time.monotonic() < deadline:
        time.sleep(2)
        missing = empty()
    assert not missing, "no series:\n" + "\n".join(missing)


def test_runtime_series_keep_their_labels_next_to_the_scrape_job(scene):
    series = scene["prom"].query(f'phalanx_runtime_step{{namespace="{scene["ns"]}", trainingjob="{TRAINING}"}}')
    assert series, "no runtime series"
    labels = series[0]["metric"]
    assert labels["job"] == RUNTIME_JOB and labels["rank"] == "0" and "exported_job" not in labels
    operator_side = scene["prom"].query(f'phalanx_trainingjob_step{{namespace="{scene["ns"]}", trainingjob="{TRAINING}"}}')
    assert operator_side and operator_side[0]["metric"]["job"] == OPERATOR_JOB
    assert scene["prom"].query(f'up{{job="{OPERATOR_JOB}"}} == 1')


def test_every_alert_expression_returns_series_and_alerts_fire(scene):
    prom, ns = scene["prom"], scene["ns"]
    expected = {
        ("PhalanxJobNotProgressing", "hung"),
        ("PhalanxJobRestartingRepeatedly", "flaky"),
        ("PhalanxJobPendingTooLong", "big"),
        ("PhalanxJobFailed", "invalid"),
        ("PhalanxJobCheckpointStale", TRAINING),
        ("PhalanxOperatorDown", ""),
        ("PhalanxOperatorReconcileErrors", ""),
    }
    step = f'phalanx_trainingjob_step{{namespace="{ns}", trainingjob="{TRAINING}"}} > 0'
    wait_for(lambda: prom.query(step), 180, "the operator to see the run's first steps")
    time.sleep(2)  # a rule evaluation later: the run counts as progressing from here on
    seen: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 240
    while not expected <= seen and time.monotonic() < deadline:
        seen |= prom.firing()
        time.sleep(1)
    assert expected <= seen, f"never fired: {expected - seen}; fired: {seen}"
    assert ("PhalanxJobNotProgressing", TRAINING) not in seen  # it trains
    # A loss is finite here; the expression still selects the job's series (NaN/Inf: test_alerts).
    for rule in alert_rules(render_rules(**TEST_PARAMS)):
        for sel in selectors(rule["expr"]):
            assert prom.query(sel), f"{rule['alert']}: {sel} selects nothing"
    pending = prom.query(f'ALERTS{{alertname="PhalanxJobPendingTooLong", namespace="{ns}", trainingjob="big"}}')
    condition = next(c for c in scene["custom"].get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "big")["status"]["conditions"]
                     if c["type"] == "Schedulable")
    assert pending and pending[0]["metric"]["reason"] == condition["reason"] and condition["status"] == "False"


def test_deleted_job_series_leave_the_operator_and_prometheus(scene):
    prom, ns = scene["prom"], scene["ns"]
    needle = 'trainingjob="hung"'
    wait_for(lambda: needle in scene["operator"].metrics(), 30, "the hung job's series")
    scene["custom"].delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "hung")
    wait_for(lambda: not any(needle in line and f'namespace="{ns}"' in line for line in scene["operator"].metrics().splitlines()),
             60, "the hung job's series to leave the operator")
    wait_for(lambda: not prom.query(f'{{__name__=~"phalanx_trainingjob_.+", namespace="{ns}", trainingjob="hung"}}'),
             30, "the hung job's series to go stale in Prometheus")
    assert prom.query(f'phalanx_trainingjob_status_phase{{namespace="{ns}", trainingjob="big"}}')  # the others stay


def test_plot_of_the_run(scene):
    pytest.importorskip("matplotlib")
    wait_for(lambda: (scene["ckpt"] / "metrics.jsonl").exists(), 60, "the run's metrics log")
    out = scene["work"] / "curves.png"
    res = subprocess.run([sys.executable, "-m", "phalanx", "plot", str(scene["ckpt"]), "-o", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:4] == b"\x89PNG" and res.stdout.startswith(f"wrote {out}: steps 1–")
