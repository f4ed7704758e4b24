"""Kube answers 404 (gone), 409 (exists) and 422 (no longer applies) in one place
(``_call_expecting``): each call names the outcomes it acts on, anything else is raised."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx import constants as C
from phalanx.kube import Kube, Outcome, api_message, expected_outcome
from phalanx.metrics import API_REQUESTS

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


class _Response:
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
            return _Response()
        return method


def _run(call, status):
    async def main():
        kube = Kube(client.ApiClient(), concurrency=2)
        kube.core = kube.custom = kube.networking = api = _Api(status)
        try:
            return await call(kube), api.calls
        finally:
            kube.pool.shutdown()

    return asyncio.run(main())


TRIAL = {"apiVersion": f"{C.GROUP}/{C.VERSION}", "kind": C.KIND, "metadata": {"name": "s-0", "namespace": "ns"}}
CALLS = {
    "delete_pod": lambda kube: kube.delete_pod("ns", "p"),
    "force_delete_pod": lambda kube: kube.force_delete_pod("ns", "p"),
    "delete_job": lambda kube: kube.delete_job("ns", "j"),
    "read": lambda kube: kube.read("v1", "ConfigMap", "ns", "c"),
    "get_custom": lambda kube: kube.get_custom("scheduling.k8s.io/v1alpha2", "podgroups", "ns", "g"),
    "release_pod": lambda kube: kube.release_pod("ns", "p", "n0"),
    "create_job": lambda kube: kube.create_job("ns", TRIAL),
    "suspend_job": lambda kube: kube.suspend_job("ns", "s-0"),
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
])
def test_each_call_acts_on_its_named_outcomes(call, status, result):
    assert _run(CALLS[call], status)[0] == result


@pytest.mark.parametrize("call, status", [
    ("delete_pod", 409), ("delete_pod", 500), ("force_delete_pod", 403), ("delete_job", 500),
    ("read", 403), ("get_custom", 500), ("release_pod", 409), ("release_pod", 500),
    ("create_job", 404), ("create_job", 422), ("create_job", 403), ("suspend_job", 409), ("suspend_job", 500),
])
def test_any_other_answer_is_raised(call, status):
    with pytest.raises(ApiException) as raised:
        _run(CALLS[call], status)
    assert raised.value.status == status


def test_the_sweeps_calls_go_through_the_gate_and_are_counted():
    before = {verb: API_REQUESTS.labels(verb)._value.get() for verb in ("create", "patch")}

    async def calls(kube):
        await kube.create_job("ns", TRIAL)
        await kube.suspend_job("ns", "s-0")
        await kube.patch_status("ns", "sweep", {"phase": "Running"}, {"phase": "Pending", "message": "m"},
                                plural=C.SWEEP_PLURAL)

    _, seen = _run(calls, 200)
    assert [name for name, _, _ in seen] == ["create_namespaced_custom_object", "patch_namespaced_custom_object",
                                             "patch_namespaced_custom_object_status"]
    assert seen[0][1] == (C.GROUP, C.VERSION, "ns", C.PLURAL, TRIAL)
    assert seen[1][1] == (C.GROUP, C.VERSION, "ns", C.PLURAL, "s-0", {"spec": {"suspend": True}})
    assert seen[2][1] == (C.GROUP, C.VERSION, "ns", C.SWEEP_PLURAL, "sweep",
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
