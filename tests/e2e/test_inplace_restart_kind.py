"""A killed rank restarts the gang in place (Kubernetes RestartAllContainers): the same pods on the
same nodes, their containers restarted, the workers resumed from the last checkpoint; with in-place
restarts turned off in the operator's config, the same kill recreates the gang as a new attempt.

Each test kills one rank's worker process (SIGKILL through `exec`) once a checkpoint exists and
prints the time from the kill to the first training step after it: on a 2-core kind cluster,
14–27 s in place and 16–27 s recreating (2 nodes × 1 process, the debug model; both are mostly the
restarted runtime's start-up). The hang test stops a rank (SIGSTOP): the first step after the
restart follows the hang's detection (hangTimeoutSeconds) by about 10 s; the kubelet keeps no exit
code of a container it restarted for RestartAllContainers (lastState: 137, RestartingAllContainers),
so status.lastFailure names the pod and rank with an unknown exit code.
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
# Signals every worker process of the pod: the trainer's workers are forked from the launcher's
# forkserver, whose command line they show (runtime/phalanx_runtime/workers.py), or run
# `-m phalanx_runtime.train` (PHALANX_WORKER_START=subprocess).
SIGNAL_WORKERS = """
import os, signal, sys
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
        os.kill(int(pid), getattr(signal, sys.argv[1]))
        print("signalled", pid)
"""
# The hang test's failurePolicy.hangTimeoutSeconds: well beyond what the pods take to see the
# operator's restart request (the kubelet rewrites the downward-API file when it syncs the pod) and
# what a restarted gang takes to its first step, on a loaded kind node too.
HANG_TIMEOUT = 150
# The kill tests' steps: enough that the trainer still runs when the status shows the checkpoint at
# step 10 (the operator reads progress every resync; forked workers train 40 steps within one).
KILL_TEST_STEPS = 300


def signal_workers(jobs, pod: str, signal_name: str = "SIGKILL") -> str:
    try:
        return stream(jobs.core.connect_get_namespaced_pod_exec, pod, jobs.ns, container="trainer",
                      command=["python3", "-c", SIGNAL_WORKERS, signal_name], stderr=True, stdin=False, stdout=True,
                      tty=False)
    except client.ApiException as exc:  # the trainer is not running: say what the gang went through
        job = pod.rsplit("-node-", 1)[0]
        raise AssertionError(f"no exec into {pod}'s trainer ({exc.reason}); {job}: {situation(jobs, job)}") from exc


def situation(jobs, name: str) -> str:
    """The job's restarts, last failure, Events and each pod's trainer restarts (for an assertion)."""
    status = jobs.status(name)
    events = [(e.reason, (e.message or "")[:200]) for e in jobs.events(name)]
    return (f"restarts {status.get('restarts')}, lastFailure {status.get('lastFailure')}\nEvents {events}\n"
            f"{restart_timeline(jobs.pods(name))}")


def trainer_restarts(pod) -> int:
    return next(s.restart_count for s in pod.status.container_statuses or [] if s.name == "trainer")


def restart_timeline(pods) -> str:
    """When each pod's trainer ended and started again (the kubelet's part of a restart in place)."""
    lines = []
    for pod in pods:
        trainer = next(s for s in pod.status.container_statuses or [] if s.name == "trainer")
        ended = trainer.last_state.terminated if trainer.last_state else None
        started = trainer.state.running.started_at if trainer.state and trainer.state.running else None
        if ended is not None:
            again = f", running again at {started:%H:%M:%S}" if started else ""
            at = f" at {ended.finished_at:%H:%M:%S}" if ended.finished_at else ""
            lines.append(f"{pod.metadata.name}: exit {ended.exit_code} ({ended.reason}){at}{again}")
    return "\n".join(lines)


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
    jobs.create(small_job(name, runtime_image, steps=KILL_TEST_STEPS, interval=10))
    seen = follow(jobs, name, lambda s: (s.get("lastCheckpoint") or {}).get("step", 0) >= 10, 900)
    saved = seen[-1]["lastCheckpoint"]["step"]
    pods = {p.metadata.name: p for p in jobs.pods(name)}
    assert all(p.spec.containers[0].restart_policy_rules for p in pods.values()), \
        "the pods carry no restart rule: the operator found no in-place restart support on this cluster"
    at_kill = jobs.status(name).get("step") or 0  # a step past it is trained after the restart
    assert not jobs.status(name).get("restarts"), f"restarted before the kill: {situation(jobs, name)}"
    killed_at = time.monotonic()
    assert "signalled" in signal_workers(jobs, f"{name}-node-1-0")
    follow(jobs, name, resumed_after(1, at_kill), 600)
    print(f"\nin place: kill → first step after the resume {time.monotonic() - killed_at:.1f}s")
    print(restart_timeline(jobs.pods(name)))
    final = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 900)[-1]
    assert final["restarts"] == 1 and final["lastRestartMode"] == "InPlace", final
    assert final["restartAttempt"] == 0, "an in-place restart is no new attempt"
    log = rank0_log(jobs, name, 0)
    resumed = RESUMED.search(log)
    assert resumed and int(resumed.group(1)) >= saved, f"resumed {resumed and resumed.group(0)}, a checkpoint at {saved} existed"
    assert "restarted in place (restart 1): waiting 1 s (failurePolicy.backoffSeconds)" in log, \
        "the restarted launcher waits the job's backoff, as a recreated gang does"
    assert final["step"] == KILL_TEST_STEPS and final["lastCheckpoint"]["step"] == KILL_TEST_STEPS
    assert final.get("resumedStep", 0) >= saved, f"status.resumedStep {final.get('resumedStep')}, a checkpoint at {saved} existed"
    failure = final["lastFailure"]  # the killed rank's pod; its launcher's exit code when the kubelet kept it
    assert failure["pod"] == f"{name}-node-1-0" and failure["nodeRank"] == 1, failure
    assert failure.get("exitCode") in (75, None), failure
    print(f"lastFailure: {failure}")
    after = {p.metadata.name: p for p in jobs.pods(name)}
    assert {n: (p.metadata.uid, p.spec.node_name) for n, p in after.items()} == \
        {n: (p.metadata.uid, p.spec.node_name) for n, p in pods.items()}, "the same pods on the same nodes"
    assert all(trainer_restarts(p) >= 1 for p in after.values()), "every pod's containers restarted"
    reasons = [e.reason for e in jobs.events(name)]
    assert "RestartedInPlace" in reasons, reasons


def test_with_in_place_restarts_off_a_killed_rank_recreates_the_gang(jobs, runtime_image, operator_config):
    operator_config(restartInPlace=False)
    name = "e2e-recreate"
    jobs.create(small_job(name, runtime_image, steps=KILL_TEST_STEPS, interval=10))
    follow(jobs, name, lambda s: (s.get("lastCheckpoint") or {}).get("step", 0) >= 10, 900)
    pods = jobs.pods(name)
    assert not any(p.spec.containers[0].restart_policy_rules for p in pods)
    at_kill = jobs.status(name).get("step") or 0  # a step past it is trained after the restart
    killed_at = time.monotonic()
    assert "signalled" in signal_workers(jobs, f"{name}-node-1-0")
    follow(jobs, name, resumed_after(1, at_kill), 600)
    print(f"\nrecreate: kill → first step after the resume {time.monotonic() - killed_at:.1f}s")
    final = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 900)[-1]
    assert final["restarts"] == 1 and final["lastRestartMode"] == "Recreate" and final["restartAttempt"] == 1, final
    assert {p.metadata.uid for p in jobs.pods(name)}.isdisjoint({p.metadata.uid for p in pods}), "new pods"


def operator_says(api, deployment, about: str) -> str:
    """The operator's log lines that mention ``about`` (for an assertion's message)."""
    core = client.CoreV1Api(api)
    labels = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    lines = []
    for pod in core.list_namespaced_pod(deployment.metadata.namespace, label_selector=labels).items:
        log = core.read_namespaced_pod_log(pod.metadata.name, deployment.metadata.namespace)
        lines += [f"{pod.metadata.name}: {line}" for line in log.splitlines() if about in line]
    return "\n".join(lines)


def test_a_stalled_rank_is_a_hang_and_the_gang_restarts_in_place_on_request(jobs, runtime_image, e2e_api,
                                                                            operator_deployment):
    """SIGSTOP on one rank's worker: no step for hangTimeoutSeconds; the operator asks every pod to
    restart (the restart-request annotation), each launcher reads the request from its downward-API
    file, kills its workers and exits with the in-place code, and the kubelet restarts the pods'
    containers on the same nodes."""
    name = "e2e-inplace-hang"
    obj = small_job(name, runtime_image, steps=40, interval=5)
    obj["spec"]["failurePolicy"]["hangTimeoutSeconds"] = HANG_TIMEOUT
    jobs.create(obj)
    seen = follow(jobs, name, lambda s: (s.get("lastCheckpoint") or {}).get("step", 0) >= 10, 900)
    saved = seen[-1]["lastCheckpoint"]["step"]
    pods = {p.metadata.name: p for p in jobs.pods(name)}
    assert all(p.spec.containers[0].restart_policy_rules for p in pods.values()), \
        "the pods carry no restart rule:\n" + operator_says(e2e_api, operator_deployment, "in-place restart")
    at_stop = jobs.status(name).get("step") or 0
    stopped_at = time.monotonic()
    assert "signalled" in signal_workers(jobs, f"{name}-node-1-0", "SIGSTOP")
    follow(jobs, name, resumed_after(1, at_stop), HANG_TIMEOUT + 600)
    print(f"\nhang in place: stop → first step after the resume {time.monotonic() - stopped_at:.1f}s "
          f"(hangTimeoutSeconds {HANG_TIMEOUT})")
    print(restart_timeline(jobs.pods(name)))
    final = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 900)[-1]
    events = [(e.reason, e.message) for e in jobs.events(name)]
    assert final["restarts"] == 1 and final["lastRestartMode"] == "InPlace" and final["restartAttempt"] == 0, \
        (final.get("lastFailure"), events)
    assert final["lastFailure"]["reason"] == "Hang", final["lastFailure"]
    assert final.get("resumedStep", 0) >= saved, f"status.resumedStep {final.get('resumedStep')}, a checkpoint at {saved} existed"
    after = {p.metadata.name: p for p in jobs.pods(name)}
    assert {n: (p.metadata.uid, p.spec.node_name) for n, p in after.items()} == \
        {n: (p.metadata.uid, p.spec.node_name) for n, p in pods.items()}, "the same pods on the same nodes"
    assert all(trainer_restarts(p) >= 1 for p in after.values()), "every pod's containers restarted"
    assert all(p.metadata.annotations.get("phalanx.dev/restart-request") == "1" for p in after.values()), \
        "every pod was asked to restart"
    assert "RestartRequested" in [reason for reason, _ in events]
