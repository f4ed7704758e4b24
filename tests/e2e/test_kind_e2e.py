"""Real pods that train: the example job, pod loss → gang restart → resume, suspend/resume, delete.

Every job here runs the built-in runtime on the built-in model and corpus (CPU, gloo) with its
checkpoints on the shared ReadWriteMany volume ``phalanx-shared``.
"""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.integration.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cpu-3d-demo.yaml"
RESUMED = re.compile(r"resumed from \S+ \(step (\d+)\)")
STEP_LOSS = re.compile(r"step (\d+)/\d+ loss ([0-9.]+)")


def losses_in(log: str) -> dict[int, float]:
    """Per-step loss from the runtime's log lines ("step 3/30 loss 5.28950 …")."""
    return {int(m.group(1)): float(m.group(2)) for m in STEP_LOSS.finditer(log)}
pytestmark = pytest.mark.timeout(1500)


def small_job(name: str, image: str, steps: int = 40, interval: int = 5) -> dict:
    """Two nodes × one process (data parallel), quick steps, frequent checkpoints."""
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "image": image,
            "nodes": 2,
            "procsPerNode": 1,
            "resources": {"cpu": "500m", "memory": "2Gi"},
            "model": {"preset": "debug"},
            "data": {"source": "corpus", "seqLen": 64},
            "training": {"steps": steps, "globalBatchSize": 8, "lr": 0.003, "precision": "fp32"},
            "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "phalanx-shared"}},
                           "intervalSteps": interval, "async": False},
            "failurePolicy": {"maxRestarts": 3, "backoffSeconds": 1},
        },
    }


def follow(jobs, name: str, until, timeout: float) -> list[dict]:
    """Poll the status until ``until(status)``; return every distinct status seen."""
    seen: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = jobs.status(name)
        if not seen or status != seen[-1]:
            seen.append(status)
        if until(status):
            return seen
        assert status.get("phase") != "Failed" or until(status), f"{name} failed: {status.get('message')}\n{logs(jobs, name)}"
        time.sleep(2)
    raise AssertionError(f"{name}: timed out after {timeout}s; last status {seen[-1] if seen else None}\n{logs(jobs, name)}")


def logs(jobs, name: str, tail: int = 30) -> str:
    out = []
    for pod in jobs.pods(name):
        try:
            text = jobs.core.read_namespaced_pod_log(pod.metadata.name, jobs.ns, tail_lines=tail)
        except client.ApiException as exc:
            text = f"<no log: {exc.reason}>"
        out.append(f"--- {pod.metadata.name} ({pod.status.phase}) on {pod.spec.node_name}\n{text}")
    return "\n".join(out)


def rank0_log(jobs, name: str, attempt: int) -> str:
    pod = f"{name}-node-0-{attempt}"
    return wait_for(lambda: _log_or_none(jobs, pod), 120, f"log of {pod}")


def _log_or_none(jobs, pod: str) -> str | None:
    try:
        return jobs.core.read_namespaced_pod_log(pod, jobs.ns) or None
    except client.ApiException:
        return None


def test_example_job_trains_across_workers_and_checkpoints(jobs, runtime_image, shared_dir):
    """examples/cpu-3d-demo.yaml (pp2 × dp2 ZeRO-3 × tp2 on 2 nodes × 4 procs) Succeeds with falling loss."""
    obj = yaml.safe_load(EXAMPLE.read_text())
    obj["metadata"]["name"] = name = "e2e-3d"
    obj["spec"]["image"] = runtime_image
    jobs.create(obj)
    final = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 1200)[-1]
    losses = losses_in(rank0_log(jobs, name, 0))
    assert sorted(losses) == list(range(1, 31)), f"rank 0 logged steps {sorted(losses)}"
    first, last = sum(losses[s] for s in range(1, 6)) / 5, sum(losses[s] for s in range(26, 31)) / 5
    assert last < first - 1.0, f"loss did not fall: first five {first:.3f}, last five {last:.3f}"
    assert final["step"] == 30 and final["loss"] == pytest.approx(losses[30], abs=1e-5)
    assert final["lastCheckpoint"]["step"] == 30, final
    assert final["restarts"] == 0
    pods = jobs.pods(name)
    assert len(pods) == 2 and len({p.spec.node_name for p in pods}) == 2, "one pod per worker node"
    if shared_dir:
        committed = sorted(p.parent.name for p in (shared_dir / jobs.ns / name).glob("step-*/COMMITTED"))
        assert committed == ["step-10", "step-20", "step-30"], committed


def test_pod_killed_mid_run_restarts_gang_and_resumes(jobs, runtime_image):
    name = "e2e-kill"
    jobs.create(small_job(name, runtime_image, steps=60, interval=5))
    seen = follow(jobs, name, lambda s: (s.get("lastCheckpoint") or {}).get("step", 0) >= 10, 900)
    saved = seen[-1]["lastCheckpoint"]["step"]
    victim = f"{name}-node-1-0"
    jobs.core.delete_namespaced_pod(victim, jobs.ns, grace_period_seconds=0)
    seen = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 900)
    assert seen[-1]["restarts"] >= 1, seen[-1]
    assert any(s.get("phase") == "Restarting" for s in seen) or seen[-1]["restarts"] >= 1
    attempt = seen[-1]["restartAttempt"]
    assert attempt >= 1
    resumed = RESUMED.search(rank0_log(jobs, name, attempt))
    assert resumed, "the new gang did not resume from a checkpoint"
    assert int(resumed.group(1)) >= saved, f"resumed from step {resumed.group(1)}, a checkpoint at {saved} existed"
    assert seen[-1]["step"] == 60 and seen[-1]["lastCheckpoint"]["step"] == 60


def test_suspend_then_resume_continues_from_checkpoint(jobs, runtime_image):
    name = "e2e-suspend"
    jobs.create(small_job(name, runtime_image, steps=60, interval=5))
    follow(jobs, name, lambda s: (s.get("lastCheckpoint") or {}).get("step", 0) >= 10, 900)
    jobs.patch(name, {"spec": {"suspend": True}})
    follow(jobs, name, lambda s: s.get("phase") == "Suspended", 300)
    wait_for(lambda: not jobs.pods(name) or None, 180, "pods of the suspended job to go")
    saved = jobs.status(name)["lastCheckpoint"]["step"]
    jobs.patch(name, {"spec": {"suspend": False}})
    seen = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 900)
    resumed = RESUMED.search(rank0_log(jobs, name, seen[-1]["restartAttempt"]))
    assert resumed and int(resumed.group(1)) >= saved, "resumed from the checkpoint written at suspension"


def test_delete_removes_every_child(jobs, runtime_image):
    name = "e2e-delete"
    jobs.create(small_job(name, runtime_image, steps=400, interval=0))
    follow(jobs, name, lambda s: s.get("phase") == "Running", 600)
    jobs.delete(name)
    selector = f"phalanx.dev/job-name={name}"

    def gone():
        core = jobs.core
        left = (core.list_namespaced_pod(jobs.ns, label_selector=selector).items
                + core.list_namespaced_service(jobs.ns, label_selector=selector).items
                + core.list_namespaced_config_map(jobs.ns, label_selector=selector).items)
        return not left or None

    wait_for(gone, 240, f"pods, services and configmaps of {name} to be garbage-collected")
    with pytest.raises(client.ApiException) as err:
        jobs.get(name)
    assert err.value.status == 404


def test_invalid_job_is_refused_and_creates_nothing(jobs, runtime_image):
    obj = copy.deepcopy(small_job("e2e-bad", runtime_image))
    obj["spec"]["parallelism"] = {"tensor": 3}
    with pytest.raises(client.ApiException) as err:
        jobs.create(obj)
    assert err.value.status == 422 and "tensor" in err.value.body
    assert not jobs.pods("e2e-bad")


def test_jobs_run_restricted_as_the_runtime_user(jobs, e2e_api, runtime_image, shared_dir):
    """The e2e namespace enforces Pod Security "restricted" (hack/kind-e2e.sh): the example job's
    pods were admitted there, ran as uid 1000 and wrote their checkpoints as that user."""
    ns = client.CoreV1Api(e2e_api).read_namespace(jobs.ns)
    assert ns.metadata.labels.get("pod-security.kubernetes.io/enforce") == "restricted"
    name = "e2e-restricted"
    jobs.create(small_job(name, runtime_image, steps=10, interval=5))
    follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 900)
    for pod in jobs.pods(name):
        sc = pod.spec.security_context
        assert sc.run_as_non_root and sc.run_as_user == 1000 and sc.seccomp_profile.type == "RuntimeDefault"
        assert pod.spec.containers[0].security_context.allow_privilege_escalation is False
    if shared_dir:
        committed = list((shared_dir / jobs.ns / name).glob("step-*/COMMITTED"))
        assert committed and all(p.stat().st_uid == 1000 for p in committed), committed


def test_diverged_job_ends_with_its_final_phase_and_a_readable_status(jobs, runtime_image):
    """lr 10 with weight decay 10 drives the weights to inf within ~20 steps: the loss goes NaN.
    The status stays writable (no NaN in it), says LossNotFinite, and reaches its final phase."""
    name = "e2e-nan"
    obj = small_job(name, runtime_image, steps=40, interval=0)
    obj["spec"]["training"].update(lr=10, weightDecay=10, gradClip=0, lrSchedule={"decay": "constant"})
    jobs.create(obj)
    final = follow(jobs, name, lambda s: s.get("phase") in ("Succeeded", "Failed"), 900)[-1]
    assert final["phase"] == "Succeeded" and final["step"] == 40, final
    cond = next(c for c in final["conditions"] if c["type"] == "LossNotFinite")
    assert cond["status"] == "True", cond
    assert "loss" not in final or final["loss"] == final["loss"]  # never NaN in the stored status
    assert any(e.reason == cond["reason"] for e in jobs.events(name)), "a Warning event says the loss diverged"
