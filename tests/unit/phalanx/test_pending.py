"""Pending pods: rendered manifests kept as JSON bytes between decide() and their create."""

from __future__ import annotations

import json

from phalanx.api.config import OperatorConfig
from phalanx.api.slots import worker
from phalanx.api.types import TrainingJob
from phalanx.pending import Pending, as_sendable, compact_pods
from phalanx.render.job import render_children


def _children(nodes: int = 4) -> list[dict]:
    job = TrainingJob.model_validate({
        "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "pend", "namespace": "ns", "uid": "u-1"},
        "spec": {"image": "img", "nodes": nodes, "procsPerNode": 2, "resources": {"gpus": 2}, "model": {"preset": "debug"}},
    })
    return render_children(job, OperatorConfig(), 0, only=[worker(r) for r in range(nodes)])


def test_only_pods_are_compacted_and_they_round_trip_exactly():
    children = _children()
    compact = compact_pods(children)
    assert [type(c) is Pending for c in compact] == [c["kind"] == "Pod" for c in children]
    for before, after in zip(children, compact, strict=True):
        assert as_sendable(after) == before  # what the API server gets is what was rendered
        assert dict(after) == before  # a Mapping like the dict it stands for
    assert compact_pods(compact) == compact  # idempotent: never wrapped twice


def test_kind_and_metadata_are_read_without_decoding():
    pod = next(c for c in _children() if c["kind"] == "Pod")
    pending = Pending(pod)
    pending._body = b"not json"  # any decode would fail now
    assert pending["kind"] == "Pod"
    assert pending["metadata"]["name"] == pod["metadata"]["name"]
    assert pending["metadata"]["labels"] == pod["metadata"]["labels"]


def test_a_decoded_pod_is_a_fresh_dict_each_time():
    pending = Pending(next(c for c in _children() if c["kind"] == "Pod"))
    first = pending.decode()
    first["spec"]["containers"][0]["image"] = "changed"
    assert pending.decode()["spec"]["containers"][0]["image"] == "img"


def test_a_pending_pod_is_several_times_smaller_than_its_dicts():
    import tracemalloc

    pods = [c for c in _children(64) if c["kind"] == "Pod"]
    blob = json.dumps(pods)
    tracemalloc.start()
    as_dicts = json.loads(blob)  # fresh dicts, as the render leaves them
    dict_bytes = tracemalloc.get_traced_memory()[0]
    compact = compact_pods(as_dicts)
    del as_dicts  # what stays: the JSON bytes and each pod's metadata
    compact_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(compact) == 64
    assert compact_bytes * 2.5 < dict_bytes, (compact_bytes, dict_bytes)


def test_the_job_loop_holds_a_plans_pods_as_pending():
    """The job loop's decide step (on the decide thread) hands Kube.execute pending pods, not dicts."""
    from datetime import UTC, datetime

    from phalanx import offloop
    from phalanx.decision import Observed

    obj = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "pend", "namespace": "ns", "uid": "u-1", "generation": 1},
           "spec": {"image": "img", "nodes": 4, "procsPerNode": 1, "model": {"preset": "debug"}}, "status": {}}
    plan = offloop.decide_off_loop(obj, Observed(pods=[], service_exists=False, config_map_exists=False,
                                                  network_policy_exists=False), datetime.now(UTC))
    pods = [c for c in plan.create if c["kind"] == "Pod"]
    assert len(pods) == 4 and all(isinstance(p, Pending) for p in pods)
    assert all(not isinstance(c, Pending) for c in plan.create if c["kind"] != "Pod")


def test_kube_decodes_a_pending_body_in_its_pool_past_the_gate():
    """Decoding before the concurrency gate would bring every waiting pod back as dicts at once."""
    import asyncio
    import threading

    from kubernetes import client

    from phalanx.kube import Kube

    seen = []

    class Response:
        data = b"{}"

        def release_conn(self):
            pass

    def create(namespace, body, _preload_content):
        seen.append((namespace, type(body), threading.current_thread().name))
        return Response()

    pod = Pending(next(c for c in _children() if c["kind"] == "Pod"))

    async def main():
        kube = Kube(client.ApiClient(), concurrency=1)
        await kube.gate.acquire()  # all slots taken: the call waits, nothing decoded yet
        call = asyncio.ensure_future(kube._call("create", create, "ns", pod))
        await asyncio.sleep(0.05)
        assert seen == []
        kube.gate.release()
        await call

    asyncio.run(main())
    assert seen == [("ns", dict, seen[0][2])] and seen[0][2].startswith("kube")


def test_a_plans_pods_share_one_dictionary_and_cost_a_fraction_of_their_json():
    children = _children(64)
    compact = compact_pods(children)
    pending = [c for c in compact if isinstance(c, Pending)]
    assert len({id(p._zdict) for p in pending}) == 1  # one dictionary a plan
    body = sum(len(p._body) for p in pending)
    raw = sum(len(json.dumps(c, separators=(",", ":"))) for c in children if c["kind"] == "Pod")
    assert body * 8 < raw, (body, raw)
    assert [as_sendable(c) for c in compact] == children  # still exact, each pod
    alone = Pending(next(c for c in children if c["kind"] == "Pod"))  # no dictionary: deflated alone
    assert alone.decode() == next(c for c in children if c["kind"] == "Pod")
