"""A killed rank restarts the gang in place (Kubernetes RestartAllContainers): the same pods on the
same nodes, their containers restarted, the workers resumed from the last checkpoint; with in-place
restarts turned off in the operator's config, the same kill recreates the gang as a new attempt.

Each test kills one rank's worker process (SIGKILL through `exec`) once a checkpoint exists and
prints the time from the kill to the first training step after it.
"""

from __future__ import annotations

import time

import pytest
import yaml
from kubernetes import client
from kubernetes.stream import stream

from tests.e2e.test_kind_e2e import RESUMED, follow, rank0_log, small_job
from tests.integration.harness import wait_for

pytestmark = pytest.mark.timeout(1500)
# Kills every worker process of the pod: the trainer's workers are forked from the launcher's
# forkserver, whose command line they show (runtime/phalanx_runtime/workers.py), or run
# `-m phalanx_runtime.train` (PHALANX_WORKER_START=subprocess).
KILL_WORKERS = """
import os, signal
def cmd(pid):
    return open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
def forkserver(pid):
    return any(b"multiprocessing.forkserver" in arg for arg in cmd(pid))
def forked(pid):
    return forkserver(pid) and forkserver(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        worker = b"phalanx_runtime.train" in cmd(pid) or forked(pid)
    except OSError:
        continue
    if worker:
        os.kill(int(pid), signal.SIGKILL)
        print("killed", pid)
"""


def kill_workers(jobs, pod: str) -> str:
    return stream(jobs.core.connect_get_namespaced_pod_exec, pod, jobs.ns, container="trainer",
                  command=["python3", "-c", KILL_WORKERS], stderr=True, stdin=False, stdout=True, tty=False)


def trainer_restarts(pod) -> int:
    return next(s.restart_count for s in pod.status.container_statuses or [] if s.name == "trainer")


def resumed_after(seen_restarts: int, step: int):
    """Until the restarted gang trained past ``step`` (the last one before the kill)."""
    def until(status: dict) -> bool:
        return status.get("restarts", 0) >= seen_restarts and (status.get("step") or 0) > step
    return until


@pytest.fixture
def operator_config(e2e_api, operator_deployment):
    """Set keys of the operator's config.yaml; the operator restarts to read it, and again with
    the original config afterwards."""
    core, apps = client.CoreV1Api(e2e_api), client.AppsV1Api(e2e_api)
    ns = operator_deployment.metadata.namespace
    volume = next(v for v in operator_deployment.spec.template.spec.volumes if v.config_map is not None)
    name = volume.config_map.name
    original = core.read_namespaced_config_map(name, ns).data["config.yaml"]

    def restart_with(text: str) -> None:
        core.patch_namespaced_config_map(name, ns, {"data": {"config.yaml": text}})
        apps.patch_namespaced_deployment(operator_deployment.metadata.name, ns, {"spec": {"template": {"metadata": {
            "annotations": {"phalanx.dev/config-restart": str(time.time())}}}}})
        wait_for(lambda: _rolled_out(apps, operator_deployment), 300, "the operator to restart")

    def set_keys(**keys) -> None:
        restart_with(yaml.safe_dump({**yaml.safe_load(original), **keys}))

    yield set_keys
    restart_with(original)


def _rolled_out(apps, dep) -> bool:
    now = apps.read_namespaced_deployment(dep.metadata.name, dep.metadata.namespace)
    status = now.status
    return (status.observed_generation or 0) >= now.metadata.generation and status.updated_replicas == now.spec.replicas \
        and status.ready_replicas == now.spec.replicas and not (status.unavailable_replicas or 0) \
        and (status.replicas or 0) == now.spec.replicas


def test_a_killed_rank_restarts_the_gang_in_place_and_resumes(jobs, runtime_image):
    name = "e2e-inplace"
    jobs.create(small_job(name, runtime_image, steps=60, interval=5))
    seen = follow(jobs, name, lambda s: (s.get("lastCheckpoint") or {}).get("step", 0) >= 10, 900)
    saved = seen[-1]["lastCheckpoint"]["step"]
    pods = {p.metadata.name: p for p in jobs.pods(name)}
    assert all(p.spec.containers[0].restart_policy_rules for p in pods.values()), \
        "the pods carry no restart rule: the operator found no in-place restart support on this cluster"
    at_kill = jobs.status(name).get("step") or 0  # a step past it is trained after the restart
    killed_at = time.monotonic()
    assert "killed" in kill_workers(jobs, f"{name}-node-1-0")
    follow(jobs, name, resumed_after(1, at_kill), 600)
    print(f"\nin place: kill → first step after the resume {time.monotonic() - killed_at:.1f}s")
    final = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 900)[-1]
    assert final["restarts"] == 1 and final["lastRestartMode"] == "InPlace", final
    assert final["restartAttempt"] == 0, "an in-place restart is no new attempt"
    resumed = RESUMED.search(rank0_log(jobs, name, 0))
    assert resumed and int(resumed.group(1)) >= saved, f"resumed {resumed and resumed.group(0)}, a checkpoint at {saved} existed"
    assert final["step"] == 60 and final["lastCheckpoint"]["step"] == 60
    after = {p.metadata.name: p for p in jobs.pods(name)}
    assert {n: (p.metadata.uid, p.spec.node_name) for n, p in after.items()} == \
        {n: (p.metadata.uid, p.spec.node_name) for n, p in pods.items()}, "the same pods on the same nodes"
    assert all(trainer_restarts(p) >= 1 for p in after.values()), "every pod's containers restarted"
    reasons = [e.reason for e in jobs.events(name)]
    assert "RestartedInPlace" in reasons, reasons


def test_with_in_place_restarts_off_a_killed_rank_recreates_the_gang(jobs, runtime_image, operator_config):
    operator_config(restartInPlace=False)
    name = "e2e-recreate"
    jobs.create(small_job(name, runtime_image, steps=40, interval=5))
    follow(jobs, name, lambda s: (s.get("lastCheckpoint") or {}).get("step", 0) >= 10, 900)
    pods = jobs.pods(name)
    assert not any(p.spec.containers[0].restart_policy_rules for p in pods)
    at_kill = jobs.status(name).get("step") or 0  # a step past it is trained after the restart
    killed_at = time.monotonic()
    assert "killed" in kill_workers(jobs, f"{name}-node-1-0")
    follow(jobs, name, resumed_after(1, at_kill), 600)
    print(f"\nrecreate: kill → first step after the resume {time.monotonic() - killed_at:.1f}s")
    final = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 900)[-1]
    assert final["restarts"] == 1 and final["lastRestartMode"] == "Recreate" and final["restartAttempt"] == 1, final
    assert {p.metadata.uid for p in jobs.pods(name)}.isdisjoint({p.metadata.uid for p in pods}), "new pods"
