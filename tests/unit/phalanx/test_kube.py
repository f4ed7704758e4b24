"""Kube._create_pods: slow start without a batch barrier, and a refusal stops the rest."""

import asyncio
import json
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx import constants
from phalanx.decision import Plan
from phalanx.kube import LOG_READ_TIMEOUT_SECONDS, Kube, Outcome, api_message, expected_outcome
from phalanx.lifecycle.refusals import Refusal
from phalanx.metrics import API_REQUESTS


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


# -------------------------------------------------------------------------------------------------
# Kube answers 404 (gone), 409 (exists) and 422 (no longer applies) in one place
# (``_call_expecting``): each call names the outcomes it acts on, anything else is raised.

GONE, EXISTS, UNPROCESSABLE = Outcome.GONE, Outcome.EXISTS, Outcome.UNPROCESSABLE


@pytest.mark.parametrize("status, expected, outcome", [
    (404, (GONE,), GONE),
    (409, (EXISTS,), EXISTS),
    (422, (GONE, UNPROCESSABLE), UNPROCESSABLE),
    (404, (GONE, UNPROCESSABLE), GONE),
    (404, (EXISTS,), None),  # not expected here: an error
    (409, (GONE,), None),
    (500, (GONE, EXISTS, UNPROCESSABLE), None),
    (200, (Outcome.DONE,), None),  # an error's status never reads as done
    (None, (GONE,), None),  # no status (transport trouble)
])
def test_an_error_is_an_outcome_only_where_the_call_expects_it(status, expected, outcome):
    assert expected_outcome(status, expected) is outcome


class _ErrorResponse:
    data = b'{"metadata": {"name": "x"}}'

    def release_conn(self):
        pass


class _Api:
    """Every API method answers with ``status`` (200: the object) and records its call."""

    def __init__(self, status):
        self.status, self.calls = status, []

    def __getattr__(self, name):
        def method(*args, **kwargs):
            self.calls.append((name, args, {k: v for k, v in kwargs.items() if k != "_preload_content"}))
            if self.status != 200:
                raise ApiException(status=self.status, reason="Reason")
            return _ErrorResponse()
        return method


def _run_call(call, status):
    async def main():
        kube = Kube(client.ApiClient(), concurrency=2)
        kube.core = kube.custom = kube.networking = api = _Api(status)
        try:
            return await call(kube), api.calls
        finally:
            kube.pool.shutdown()

    return asyncio.run(main())


TRIAL = {"apiVersion": f"{constants.GROUP}/{constants.VERSION}", "kind": constants.KIND, "metadata": {"name": "s-0", "namespace": "ns"}}
CALLS = {
    "delete_pod": lambda kube: kube.delete_pod("ns", "p"),
    "force_delete_pod": lambda kube: kube.force_delete_pod("ns", "p"),
    "delete_job": lambda kube: kube.delete_job("ns", "j"),
    "read": lambda kube: kube.read("v1", "ConfigMap", "ns", "c"),
    "get_custom": lambda kube: kube.get_custom("scheduling.k8s.io/v1alpha2", "podgroups", "ns", "g"),
    "release_pod": lambda kube: kube.release_pod("ns", "p", "n0"),
    "create_job": lambda kube: kube.create_job("ns", TRIAL),
    "suspend_job": lambda kube: kube.suspend_job("ns", "s-0"),
    "annotate_pod": lambda kube: kube.annotate_pod("ns", "p", {"a": "1"}),
}


@pytest.mark.parametrize("call, status, result", [
    ("delete_pod", 200, None), ("delete_pod", 404, None),  # gone already: deleted
    ("force_delete_pod", 404, None),
    ("delete_job", 200, None), ("delete_job", 404, None),
    ("read", 200, {"metadata": {"name": "x"}}), ("read", 404, None),  # absent: None
    ("get_custom", 200, {"metadata": {"name": "x"}}), ("get_custom", 404, None),
    ("release_pod", 200, True), ("release_pod", 404, False), ("release_pod", 422, False),  # gone, or released already
    ("create_job", 200, True), ("create_job", 409, False),  # a replayed create
    ("suspend_job", 200, None), ("suspend_job", 404, None),  # a trial gone needs no stopping
    ("annotate_pod", 200, None), ("annotate_pod", 404, None),  # a pod gone needs no request
])
def test_each_call_acts_on_its_named_outcomes(call, status, result):
    assert _run_call(CALLS[call], status)[0] == result


@pytest.mark.parametrize("call, status", [
    ("delete_pod", 409), ("delete_pod", 500), ("force_delete_pod", 403), ("delete_job", 500),
    ("read", 403), ("get_custom", 500), ("release_pod", 409), ("release_pod", 500),
    ("create_job", 404), ("create_job", 422), ("create_job", 403), ("suspend_job", 409), ("suspend_job", 500),
    ("annotate_pod", 500),
])
def test_any_other_answer_is_raised(call, status):
    with pytest.raises(ApiException) as raised:
        _run_call(CALLS[call], status)
    assert raised.value.status == status


def test_the_sweeps_calls_go_through_the_gate_and_are_counted():
    before = {verb: API_REQUESTS.labels(verb)._value.get() for verb in ("create", "patch")}

    async def calls(kube):
        await kube.create_job("ns", TRIAL)
        await kube.suspend_job("ns", "s-0")
        await kube.patch_status("ns", "sweep", {"phase": "Running"}, {"phase": "Pending", "message": "m"},
                                plural=constants.SWEEP_PLURAL)

    _, seen = _run_call(calls, 200)
    assert [name for name, _, _ in seen] == ["create_namespaced_custom_object", "patch_namespaced_custom_object",
                                             "patch_namespaced_custom_object_status"]
    assert seen[0][1] == (constants.GROUP, constants.VERSION, "ns", constants.PLURAL, TRIAL)
    assert seen[1][1] == (constants.GROUP, constants.VERSION, "ns", constants.PLURAL, "s-0", {"spec": {"suspend": True}})
    assert seen[2][1] == (constants.GROUP, constants.VERSION, "ns", constants.SWEEP_PLURAL, "sweep",
                          {"status": {"phase": "Running", "message": None}})  # a key gone is removed
    assert API_REQUESTS.labels("create")._value.get() == before["create"] + 1
    assert API_REQUESTS.labels("patch")._value.get() == before["patch"] + 2


@pytest.mark.parametrize("body, message", [
    ('{"message": "spec.nodes: Invalid value"}', "spec.nodes: Invalid value"),
    ("not json", "Unprocessable Entity"),  # the HTTP reason then
    (None, "Unprocessable Entity"),
    ('{"kind": "Status"}', "Unprocessable Entity"),
])
def test_an_api_errors_message_is_the_servers_own_words(body, message):
    exc = ApiException(status=422, reason="Unprocessable Entity")
    exc.body = body
    assert api_message(exc) == message


def test_the_namespace_read_gives_none_when_forbidden_or_unreachable():
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from phalanx.kube import Kube

    class Core:
        def __init__(self, error):
            self.error = error

        def list_namespace(self, **_):
            raise self.error

    async def read(error):
        kube = Kube(client.ApiClient(), concurrency=1)
        kube.core = Core(error)
        return await kube.namespace_labels("team")

    for error in (ApiException(status=403, reason="forbidden"), ConnectionResetError("reset")):
        assert asyncio.run(read(error)) is None



@pytest.mark.parametrize("status, result", [(200, b'{"metadata": {"name": "x"}}'), (404, None), (403, None), (500, None)])
def test_a_pods_log_tail_is_read_bounded_and_counted(status, result):
    before = API_REQUESTS.labels("log")._value.get()
    got, calls = _run_call(lambda kube: kube.pod_log_tail("ns", "j-node-0-1", "trainer", 10, 4096), status)
    assert got == result  # unreadable: None, the hang is reported without the lines
    assert calls == [("read_namespaced_pod_log", ("j-node-0-1", "ns"),
                      {"container": "trainer", "tail_lines": 10, "limit_bytes": 4096,
                       "_request_timeout": LOG_READ_TIMEOUT_SECONDS})]
    assert API_REQUESTS.labels("log")._value.get() == before + 1


def test_a_plans_restart_requests_are_patched_onto_its_pods():
    plan = Plan(annotate_pods={"p-0": {"phalanx.dev/restart-request": "1"}})
    _, calls = _run_call(lambda kube: kube.execute("ns", plan, None, "job"), 200)
    assert calls == [("patch_namespaced_pod", ("p-0", "ns", {"metadata": {"annotations": {"phalanx.dev/restart-request": "1"}}}), {})]


def test_the_dry_run_probe_and_the_nodes_are_read():
    answer, calls = _run_call(lambda kube: kube.dry_run_pod({"metadata": {"namespace": "ns"}}), 200)
    assert answer == {"metadata": {"name": "x"}} and calls[0][0] == "create_namespaced_pod"
    assert calls[0][2] == {"dry_run": "All"}


class _PagedNodes:
    """list_node in pages of ``limit``, a continue token between them, as the API server does."""

    def __init__(self, count):
        self.names, self.asked = [f"n{i}" for i in range(count)], []

    def list_node(self, _preload_content, limit, _continue=None):
        start = int(_continue or 0)
        self.asked.append((limit, _continue))
        rest = str(start + limit) if start + limit < len(self.names) else None
        return _ExistingResponse({"items": [{"metadata": {"name": n}} for n in self.names[start:start + limit]],
                                  "metadata": {"continue": rest} if rest else {}})


@pytest.mark.parametrize(("count", "pages"), [(0, 1), (4, 1), (5, 2), (9, 3)])
def test_nodes_are_listed_a_page_at_a_time(count, pages):
    async def main():
        kube = Kube(client.ApiClient())
        kube.core = _PagedNodes(count)
        return kube, await kube.list_nodes(page=4)

    kube, nodes = asyncio.run(main())
    assert [n["metadata"]["name"] for n in nodes] == kube.core.names and len(kube.core.asked) == pages
