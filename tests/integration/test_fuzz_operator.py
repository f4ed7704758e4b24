"""Fuzzing the operator on a real API server: hostile TrainingJobs and TrainingSweeps
(tests/unit/test_fuzz_verdicts.py builds them) created in a tenant namespace, sent as raw JSON
(nested up to the API server's limit of 10,000 levels), under strict field validation or the
default (unknown fields pruned).

Each one is refused by the API server (4xx), or stored and then given a status by the operator
within a bound: accepted (a live phase, its pods within the default policy) or refused (Failed, a
condition naming the field), the same verdict `phalanx validate` gives the stored object. Meanwhile
a bystander job in another namespace reaches Running and its status follows its spec, and the
operator's /healthz stays 200. Fixed seed, bounded budget.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx import constants, safejson
from phalanx.sweep.check import check_sweep
from phalanx.validate import validate_job
from tests.integration.harness import GROUP, PLURAL, VERSION, Jobs, job_manifest, wait_for
from tests.unit.test_fuzz_verdicts import (
    COMMAND_SPEC,
    FUZZ,
    RUNTIME_SPEC,
    SWEEP_DEEP_SITES,
    Deep,
    _sweep,
    _with_placeholders,
    as_json,
    deep,
    is_json,
    job_docs,
    materialize,
    pod_breaches,
    sweep_docs,
)

SWEEPS = "trainingsweeps"
EXAMPLES = 25
SMALL_GANGS = 4  # an accepted job's gang stays this small: kwok nodes, 2 cores
STATUS_WITHIN = 60.0  # seconds, after the last object was created
BYSTANDER_RUNNING_WITHIN = 30.0
LIVE_PHASES = {"Pending", "Scheduling", "Running", "Restarting", "Suspended", "Succeeded"}
NAMES_A_FIELD = re.compile(r"\b(spec|metadata)[.\[]|\bspec\b")


def free_form(site: str, value: Deep) -> dict[str, Any]:
    """A sweep with ``value`` in a place whose schema takes any scalar (a parameter's values, a list
    trial's): the CRD keeps unknown fields there but bounds them to scalars."""
    return _sweep(RUNTIME_SPEC if site == "values" else COMMAND_SPEC, [SWEEP_DEEP_SITES[site](value)])


def offline_problems(doc: dict[str, Any]) -> list[Any]:
    obj = materialize(doc)
    return check_sweep(obj).problems if doc["kind"] == "TrainingSweep" else validate_job(obj)[1]


def api_refuses(doc: dict[str, Any]) -> bool:
    """The offline verdict's half that is the API server's (schema, CEL)."""
    return any(p.source == "api" for p in offline_problems(doc))


def has_deep(doc: Any) -> bool:
    return bool(_with_placeholders(doc)[1])


# One mutation each, most of them past the schema (the offline verdict says which), so that the
# operator gets to judge them; a deep value in a typed place is refused under strict validation
# and pruned otherwise.
any_doc = st.one_of(job_docs(SMALL_GANGS, most=1), sweep_docs(SMALL_GANGS, most=1)).filter(is_json)
hostile = st.one_of(
    any_doc.filter(lambda d: not api_refuses(d)), any_doc.filter(lambda d: not api_refuses(d)), any_doc,
    st.one_of(job_docs(SMALL_GANGS, deep_only=True, most=1), sweep_docs(SMALL_GANGS, deep_only=True, most=1),
              st.builds(free_form, st.sampled_from(("values", "trials")), deep)).filter(is_json))


@dataclass
class Sent:
    plural: str
    name: str
    strict: bool
    code: int  # the API server's answer
    answer: str = ""


@dataclass
class Watch:
    """What the monitor thread saw: /healthz failures, the bystander's phases."""

    unhealthy: list[str] = field(default_factory=list)
    phases: list[tuple[float, str | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def running_at(self) -> float | None:
        return next((t for t, phase in self.phases if phase == "Running"), None)


@pytest.fixture
def bystander_ns(cluster):
    name = f"by-{uuid.uuid4().hex[:8]}"
    with cluster.api() as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": name}})
        wait_for(lambda: _exists(core.read_namespaced_service_account, "default", name), 60, "default service account")
        yield name
        core.delete_namespace(name)


def _exists(get, *args) -> bool:
    try:
        get(*args)
        return True
    except ApiException as exc:
        if exc.status != 404:
            raise
        return False


def post_raw(api: client.ApiClient, namespace: str, plural: str, text: str, strict: bool) -> tuple[int, str]:
    """POST ``text`` as is: the client's json.dumps would recurse on a deep object."""
    cfg = api.configuration
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    token = cfg.get_api_key_with_prefix("authorization")
    if token:
        headers["Authorization"] = token
    query = "?fieldValidation=Strict" if strict else ""
    url = f"{cfg.host}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}{query}"
    r = api.rest_client.pool_manager.request("POST", url, body=text.encode(), headers=headers, timeout=60)
    return r.status, r.data.decode(errors="replace")[:500]


def read(api: client.ApiClient, namespace: str, plural: str, name: str | None = None) -> Any:
    """An object (or the list), decoded as the operator decodes it (safejson)."""
    custom = client.CustomObjectsApi(api)
    if name is None:
        r = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural, _preload_content=False)
    else:
        r = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, _preload_content=False)
    return safejson.loads(r.data)


def monitor(cluster, operator, namespace: str, seen: Watch) -> None:
    try:
        _monitor(cluster, operator, namespace, seen)
    except BaseException as exc:  # noqa: BLE001 - a monitor that stops must say why
        seen.unhealthy.append(f"monitor stopped: {exc!r}")


def _monitor(cluster, operator, namespace: str, seen: Watch) -> None:
    with cluster.api() as api:
        jobs = Jobs(api, namespace)
        while not seen.stop.wait(0.5):
            try:
                if not operator.healthy():
                    seen.unhealthy.append(f"{time.monotonic():.1f}: /healthz not 200")
            except AssertionError as exc:  # the process exited
                seen.unhealthy.append(str(exc)[-3000:])
                return
            try:
                seen.phases.append((time.monotonic(), jobs.status("bystander").get("phase")))
            except Exception as exc:  # noqa: BLE001 - the API server under load: recorded, not fatal
                seen.phases.append((time.monotonic(), f"error {exc!r:.200}"))


def _name(doc: dict[str, Any], i: int) -> str:
    """The generated name, unless it is the base one: then one of its own."""
    name = doc["metadata"].get("name")
    return f"fz{i}-{name}" if name in ("job", "sweep") else name


def _verdict_of(obj: dict[str, Any], plural: str) -> str:
    """What the operator must make of the stored object: 'accept' or 'refuse'."""
    if plural == SWEEPS:
        return "accept" if check_sweep(obj).valid else "refuse"
    return "refuse" if validate_job(obj)[1] else "accept"


def _refusal(status: dict[str, Any]) -> str | None:
    """The message of a refusal that names a field, or None."""
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Valid", "Failed") and NAMES_A_FIELD.search(cond.get("message") or ""):
            return cond["message"]
    return None


def test_hostile_objects_each_get_a_verdict_and_the_bystander_runs(cluster, api, namespace, bystander_ns, operator):
    started = time.monotonic()
    bystander = Jobs(api, bystander_ns)
    bystander.create(job_manifest("bystander", nodes=1, procs=1, gpus=1))
    created_at = time.monotonic()
    seen = Watch()
    watcher = threading.Thread(target=monitor, args=(cluster, operator, bystander_ns, seen), daemon=True)
    watcher.start()
    sent: list[Sent] = []
    mismatches: list[str] = []  # the API server's answer against the offline verdict's

    @settings(FUZZ, max_examples=EXAMPLES)
    @given(hostile, st.booleans())
    # Every run: deep values where the schema takes any scalar, within json.loads' recursion (and
    # deeper than safejson cuts), and past the API server's limit.
    @example(free_form("values", Deep(500, "map")), False)
    @example(free_form("trials", Deep(999, "list")), False)
    @example(free_form("values", Deep(10_000, "map")), False)
    def send(doc, strict):
        doc = {**doc, "metadata": {**doc["metadata"], "name": _name(doc, len(sent)), "namespace": namespace}}
        for key in ("uid", "generation"):
            doc["metadata"].pop(key, None)
        plural = SWEEPS if doc["kind"] == "TrainingSweep" else PLURAL
        code, answer = post_raw(api, namespace, plural, as_json(doc), strict)
        assert code < 500, (code, answer, doc)  # a refusal is the client's fault, never the server's
        sent.append(Sent(plural, doc["metadata"]["name"], strict, code, answer))
        if strict and not has_deep(doc) and code != 409 and (code >= 300) != api_refuses(doc):
            mismatches.append(f"{plural}/{doc['metadata']['name']}: API server {code} {answer[:300]}; offline: "
                              f"{[str(p) for p in offline_problems(doc) if p.source == 'api'][:3]}")

    try:
        send()
        sent_at = time.monotonic()
        stored = [s for s in sent if s.code < 300]
        # The operator is at its busiest now: the bystander's spec changes, its status must follow.
        generation = bystander.patch("bystander", {"spec": {"failurePolicy": {"maxRestarts": 7}}})["metadata"]["generation"]
        wait_for(lambda: bystander.status("bystander").get("observedGeneration") == generation, 30,
                 "the bystander's status to follow its spec during the burst")

        def statuses() -> dict[str, dict[str, Any]]:
            """Every stored object's status; trials the operator created count too."""
            out = {}
            for plural in (PLURAL, SWEEPS):
                for obj in read(api, namespace, plural)["items"]:
                    out[f"{plural}/{obj['metadata']['name']}"] = obj
            return out

        def all_have_a_status():
            objs = statuses()
            missing = [k for k in (f"{s.plural}/{s.name}" for s in stored) if k not in objs]
            assert not missing, f"stored but gone: {missing}"
            waiting = [k for k, o in objs.items() if not (o.get("status") or {}).get("phase")]
            return not waiting and objs or None

        try:
            objs = wait_for(all_have_a_status, STATUS_WITHIN, "a status on every stored object", interval=1.0)
        except AssertionError:
            objs = statuses()
            waiting = {k: o.get("status") for k, o in objs.items() if not (o.get("status") or {}).get("phase")}
            raise AssertionError(f"no status within {STATUS_WITHIN}s: {sorted(waiting)}\n{operator.tail(60)}") from None

        problems = []
        for key, obj in sorted(objs.items()):
            plural, name = key.split("/", 1)
            status = obj["status"]
            refusal = _refusal(status)
            expected = _verdict_of(obj, plural)
            if status["phase"] in LIVE_PHASES and expected == "accept":
                if plural == PLURAL:
                    for pod in Jobs(api, namespace).pods(name):
                        breaches = pod_breaches(api.sanitize_for_serialization(pod))
                        problems += [f"{key}: pod {pod.metadata.name}: {b}" for b in breaches]
            elif status["phase"] == "Failed" and refusal and expected == "refuse":
                pass
            elif status["phase"] == "Failed" and refusal:  # accepted by the verdict, refused at pod creation
                problems.append(f"{key}: `phalanx validate` accepts it, the operator failed it: {refusal[:300]}")
            else:
                problems.append(f"{key}: phase {status['phase']}, verdict {expected}, conditions {status.get('conditions')}")
        # Every finding at once: one can hide behind another.
        generation = bystander.patch("bystander", {"spec": {"failurePolicy": {"maxRestarts": 8}}})["metadata"]["generation"]
        try:
            wait_for(lambda: bystander.status("bystander").get("observedGeneration") == generation, 30,
                     "the bystander's status to follow its spec after the burst")
        except AssertionError as exc:
            problems.append(str(exc))
        running = seen.running_at()
        if running is None or running - created_at > BYSTANDER_RUNNING_WITHIN:
            problems.append(f"bystander not Running within {BYSTANDER_RUNNING_WITHIN}s: phases {seen.phases[-5:]}")
        if not watcher.is_alive():
            problems.append("the monitor stopped")
        problems += [f"verdicts differ: {m}" for m in mismatches] + seen.unhealthy
        assert not problems, "\n".join(problems)
        refused = Counter(s.code for s in sent if s.code >= 300)
        print(f"\n{len(sent)} sent in {sent_at - started:.0f}s: refused by the API server {dict(refused)}, "
              f"{len(stored)} stored; {len(objs)} objects with a status (trials included); "
              f"bystander Running after {running - created_at:.1f}s")
    finally:
        seen.stop.set()
        watcher.join(10)
        _clean_up(api, namespace, sent)


def _clean_up(api: client.ApiClient, namespace: str, sent: list[Sent]) -> None:
    """Delete what was stored (trials go with their sweep); an object the operator cannot let go
    of (its finalizer stays) fails the test, after its finalizer is removed by hand."""
    custom = client.CustomObjectsApi(api)
    for s in sent:
        if s.code < 300:
            try:
                custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, s.plural, s.name,
                                                       body={"propagationPolicy": "Background"})
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def left() -> list[tuple[str, dict[str, Any]]]:
        return [(p, o) for p in (PLURAL, SWEEPS) for o in read(api, namespace, p)["items"]]

    try:
        wait_for(lambda: not left(), 60, "every fuzzed object deleted", interval=1.0)
    except AssertionError:
        stuck = left()
        for plural, obj in stuck:
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, obj["metadata"]["name"],
                                                  {"metadata": {"finalizers": None}})
        raise AssertionError("not deleted within 60s (finalizers: "
                             + ", ".join(f"{p}/{o['metadata']['name']}: {o['metadata'].get('finalizers')}" for p, o in stuck)
                             + f"); {constants.FINALIZER} removed by hand") from None
