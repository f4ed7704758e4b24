"""Kube._create_pods: slow start without a batch barrier, and a refusal stops the rest."""

import asyncio
import json
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx.kube import Kube
from phalanx.lifecycle.refusals import Refusal


def _pods(n):
    return [{"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "ns"}} for i in range(n)]


class _Response:
    data = b"{}"

    def release_conn(self):
        pass


class _Core:
    """Records each create's start and the most requests in flight at once."""

    def __init__(self, slow=(), refuse=(), fail=(), delay=0.01):
        self.slow, self.refuse, self.fail, self.delay = set(slow), set(refuse), set(fail), delay
        self.started, self.in_flight, self.peak, self.lock = [], 0, 0, threading.Lock()
        self.active, self.beside_slow = set(), 0  # creates started while a slow one ran

    def create_namespaced_pod(self, namespace, body, _preload_content):
        name = body["metadata"]["name"]
        with self.lock:
            self.started.append(name)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.beside_slow += bool(self.active & self.slow)
            self.active.add(name)
        try:
            time.sleep(0.5 if name in self.slow else self.delay)
            if name in self.refuse:
                raise ApiException(status=403, reason="exceeded quota")
            if name in self.fail:
                raise ApiException(status=500, reason="etcd")
            return _Response()
        finally:
            with self.lock:
                self.in_flight -= 1
                self.active.discard(name)

    create_namespaced_service = create_namespaced_config_map = None  # only pods are created here


def _run(core, pods, concurrency=4):
    async def main():
        kube = Kube(client.ApiClient(), concurrency=concurrency)
        kube.core = core
        return await kube._create_pods(pods)

    return asyncio.run(main())


def test_every_pod_is_created_once_within_the_concurrency():
    core = _Core()
    assert _run(core, _pods(40)) == []
    assert sorted(core.started) == sorted(p["metadata"]["name"] for p in _pods(40))
    assert core.peak <= 4


def test_the_first_pod_goes_alone():
    """A namespace that refuses every pod costs one request, as with the Job controller."""
    core = _Core(refuse={f"p{i}" for i in range(40)})
    refusals = _run(core, _pods(40))
    assert core.started == ["p0"] and [r.name for r in refusals] == ["p0"] and refusals[0].code == 403


def test_a_slow_request_holds_only_its_own_slot():
    """p1 takes 0.5 s: the rest of the gang goes past it (a batch of 2 would have waited)."""
    core = _Core(slow={"p1"})
    assert _run(core, _pods(30)) == []
    assert len(core.started) == 30 and core.beside_slow >= 20


def test_a_refusal_part_way_stops_further_creates():
    core = _Core(refuse={"p6"})
    refusals = _run(core, _pods(40))
    assert [r.name for r in refusals] == ["p6"]
    assert len(core.started) <= 6 + 1 + 4  # at most one window beyond the refused pod


def test_an_unexpected_error_is_raised_after_the_requests_in_flight():
    core = _Core(fail={"p3"})
    try:
        _run(core, _pods(40))
    except ApiException as exc:
        assert exc.status == 500
    else:
        raise AssertionError("a 500 must not read as success")
    assert core.in_flight == 0 and len(core.started) < 40


# -------------------------------------------------------------------------------------------------
# Kube.create: an object that exists already counts as created only when it is the job's own
# (its owner reference); anyone else's is a refusal naming it, never adopted.


JOB_UID = "uid-of-the-job"


class _ExistingResponse:
    def __init__(self, body):
        self.data = json.dumps(body).encode()

    def release_conn(self):
        pass


class _CoreWithExisting:
    def __init__(self, existing_owner):
        self.existing_owner = existing_owner

    def create_namespaced_config_map(self, namespace, body, _preload_content, **_):
        raise ApiException(status=409, reason="AlreadyExists")

    def read_namespaced_config_map(self, name, namespace, _preload_content):
        refs = [] if self.existing_owner is None else [{"uid": self.existing_owner, "controller": True}]
        return _ExistingResponse({"metadata": {"name": name, "namespace": namespace, "ownerReferences": refs}})


def _config_map():
    return {"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "job-config", "namespace": "team",
                         "ownerReferences": [{"uid": JOB_UID, "controller": True, "kind": "TrainingJob"}]}}


def _create(existing_owner):
    async def main():
        kube = Kube(client.ApiClient())
        kube.core = _CoreWithExisting(existing_owner)
        return await kube._create_all([_config_map()])

    return asyncio.run(main())


def test_the_jobs_own_object_counts_as_created():
    assert _create(JOB_UID) == []


@pytest.mark.parametrize("owner", [None, "uid-of-someone-else"])
def test_an_object_the_job_did_not_create_is_a_refusal_naming_it(owner):
    (refusal,) = _create(owner)
    assert isinstance(refusal, Refusal) and refusal.code == 409 and not refusal.permanent
    assert "ConfigMap team/job-config exists and was not created by this job" in refusal.message
    assert "never adopts" in refusal.message
