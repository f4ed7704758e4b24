"""Rank 0's progress report is user code's output: parsed strictly, read whole, from the declared
port, and never able to break the status patch or stop the reconcile."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import time
from datetime import timedelta

import pytest

from phalanx import constants
from phalanx.decision import Observed
from phalanx.kube import Kube, http_get
from phalanx.lifecycle.progress import (
    MAX_BYTES,
    decode,
    http_body,
    loss_not_finite,
    merged_metrics,
    parse_progress,
    progress_port,
)
from phalanx.lifecycle.reconcile import decide
from tests.unit.phalanx.lifecycle.test_reconcile import T0, Sim

GOOD = {"job": "j", "phase": "Running", "step": 12, "totalSteps": 30, "loss": 3.25, "tokensPerSecond": 950.5,
        "mfu": 0.01, "stepTimeSeconds": 1.1, "worldSize": 8, "startTime": 1.8e9, "updatedAt": 1.8e9,
        "lastCheckpoint": {"step": 10, "path": "/ckpt/ns/j/step-10", "time": "2026-11-30T12:00:00Z"}}


def test_a_well_formed_report_keeps_its_known_fields():
    report = parse_progress(json.dumps({**GOOD, "extra": {"x": 1}}).encode())
    assert report == {k: v for k, v in GOOD.items() if k != "job"}
    assert parse_progress(report) == report  # idempotent: the handler parses, decide parses again


HOSTILE_BODIES = {
    "nan literal": b'{"step": 5, "loss": NaN}',
    "infinity": b'{"step": 5, "loss": Infinity, "tokensPerSecond": Infinity}',
    "overflowing float": b'{"step": 5, "loss": 1e999, "stepTimeSeconds": 1e999}',
    "strings for numbers": b'{"step": "5", "loss": "nan", "tokensPerSecond": "fast"}',
    "bools for numbers": b'{"step": true, "loss": false, "worldSize": true}',
    "negative and fractional steps": b'{"step": -1, "totalSteps": 2.5}',
    "huge integer": b'{"step": ' + b"9" * 400 + b', "tokensPerSecond": ' + b"9" * 400 + b"}",
    "wrong shapes": b'{"step": [5], "lastCheckpoint": "step-10", "resumedFrom": [1, 2]}',
    "checkpoint without path": b'{"step": 5, "lastCheckpoint": {"step": 4}}',
    "checkpoint step a string": b'{"step": 5, "lastCheckpoint": {"step": "x", "path": "/p"}}',
    "long strings": json.dumps({"step": 5, "phase": "R" * 100, "lastCheckpoint": {"step": 4, "path": "/" * 5000},
                                "resumedFrom": {"uid": "u" * 500, "step": 1}}).encode(),
    "deeply nested": b'{"step": 5, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "nested just past the limit": b'{"step": 5, "x": [[[[1]]]]}',
    "huge": b'{"step": 5, "pad": "' + b"x" * (MAX_BYTES + 1) + b'"}',
    "not JSON": b"Killed\n",
    "not UTF-8": b'{"step": 5, "phase": "\xff\xfe"}',
    "empty": b"",
    "a list": b"[1, 2, 3]",
    "a number": b"NaN",
    "null": b"null",
    "brackets inside strings": b'{"step": 5, "phase": "[[[[[[[["}',
    "escaped quotes, unterminated": b'{"step": 5, "p": "' + b'\\"' * 21_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_hostile_bodies_parse_to_finite_values_or_nothing(name):
    problems: list[str] = []
    report = parse_progress(HOSTILE_BODIES[name], problems)
    if report is None:
        assert problems  # said why
        return
    for key, value in report.items():
        if isinstance(value, float) and key != "loss":
            assert math.isfinite(value), (key, value)
        if isinstance(value, int | float) and key != "loss":
            assert not isinstance(value, bool) and 0 <= value <= 2**53
        if isinstance(value, str):
            assert len(value) <= 1024
    json.dumps({k: v for k, v in report.items() if k != "loss"}, allow_nan=False)
    if "loss" in report:
        assert isinstance(report["loss"], float)


def test_hostile_bodies_parse_in_linear_time():
    """The parser runs on the operator's event loop: no input may stall it (a string regex that
    backtracks took 19 s on 42 KB of escaped quotes)."""
    started = time.perf_counter()
    for body in HOSTILE_BODIES.values():
        parse_progress(body)
    assert time.perf_counter() - started < 1.0


def test_what_survives_of_hostile_bodies():
    assert parse_progress(HOSTILE_BODIES["nan literal"])["step"] == 5
    assert loss_not_finite(parse_progress(HOSTILE_BODIES["nan literal"]))
    assert loss_not_finite(parse_progress(HOSTILE_BODIES["infinity"]))
    assert "tokensPerSecond" not in parse_progress(HOSTILE_BODIES["infinity"])
    assert parse_progress(HOSTILE_BODIES["strings for numbers"]) == {}
    assert parse_progress(HOSTILE_BODIES["bools for numbers"]) == {}
    assert parse_progress(HOSTILE_BODIES["wrong shapes"]) == {}
    assert parse_progress(HOSTILE_BODIES["checkpoint without path"]) == {"step": 5}
    assert parse_progress(HOSTILE_BODIES["long strings"]) == {"step": 5}
    assert parse_progress(HOSTILE_BODIES["brackets inside strings"]) == {"step": 5, "phase": "[[[[[[[["}
    for name in ("deeply nested", "nested just past the limit", "huge", "not JSON", "not UTF-8", "empty", "a list",
                 "a number", "null", "escaped quotes, unterminated"):
        assert parse_progress(HOSTILE_BODIES[name]) is None, name


def test_already_decoded_objects_are_checked_too():
    deep: dict = {"step": 1}
    cur = deep
    for _ in range(10):
        cur["x"] = {}
        cur = cur["x"]
    assert decode(deep) is None
    assert parse_progress({"step": float("nan"), "loss": "x", "lastCheckpoint": {"step": 1, "path": 7}}) == {}
    assert parse_progress(["step", 1]) is None and parse_progress(42) is None  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ HTTP


def test_http_body_takes_only_a_whole_200_response():
    body = json.dumps(GOOD).encode()
    ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    assert http_body(ok) == body
    assert http_body(ok[: ok.index(b"\r\n\r\n") + 4]) is None  # headers only: Content-Length says more
    assert http_body(ok[:-5]) is None
    assert http_body(b"HTTP/1.0 404 Not Found\r\n\r\n{}") is None
    assert http_body(b"garbage") is None
    assert http_body(b"HTTP/1.0 200 OK\r\n\r\n" + b" " * (MAX_BYTES + 1)) is None


async def _serve(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_get_progress_reads_the_whole_response_when_the_body_comes_later():
    """The runtime sent the headers and the body in two writes; the body waits for the GIL while
    training (and checkpoint threads) hold it. Reading once returned the headers alone: the poll
    failed and the job status stood still (the demo's 'stopped at step 13')."""
    body = json.dumps(GOOD).encode()

    async def slow(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(body)
        await writer.drain()
        writer.close()

    async def main():
        server, port = await _serve(slow)
        async with server:
            return await Kube.get_progress(None, "127.0.0.1", port)  # type: ignore[arg-type]

    assert parse_progress(asyncio.run(main()))["step"] == 12


@pytest.mark.parametrize("behaviour", ["endless", "silent", "refused"])
def test_get_progress_gives_up_on_endless_silent_or_absent_servers(behaviour):
    async def endless(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n")
        try:
            for _ in range(10_000):
                writer.write(b"x" * 1024)
                await writer.drain()
        except ConnectionError:
            pass

    async def silent(reader, writer):
        await asyncio.sleep(5)

    async def main():
        if behaviour == "refused":
            server, port = await _serve(silent)
            server.close()
            await server.wait_closed()
            return await Kube.get_progress(None, "127.0.0.1", port)  # type: ignore[arg-type]
        server, port = await _serve(endless if behaviour == "endless" else silent)
        async with server:
            return await Kube.get_progress(None, "127.0.0.1", port, timeout=1.0)  # type: ignore[arg-type]

    started = time.monotonic()
    assert asyncio.run(main()) is None
    assert time.monotonic() - started < 4.0


def test_http_get_stops_reading_past_the_limit():
    async def big(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + b"{" * (3 * MAX_BYTES))
        await writer.drain()
        writer.close()

    async def main():
        server, port = await _serve(big)
        async with server:
            return await http_get("127.0.0.1", port, "/progress")

    assert asyncio.run(main()) is None


# ---------------------------------------------------------------------- the declared port


def _pod(ports):
    return {"spec": {"containers": [{"name": "sidecar", "ports": [{"name": "progress", "containerPort": 1111}]},
                                    {"name": constants.CONTAINER_NAME, "ports": ports}]}}


def test_progress_port_is_the_trainers_declared_port():
    assert progress_port(_pod([{"name": "rendezvous", "containerPort": 23455},
                               {"name": "progress", "containerPort": 23456}])) == 23456
    assert progress_port({"spec": {}}) == constants.PROGRESS_PORT
    for bad in ("23456", 0, 70000, True, None):
        pod = _pod([{"name": "progress", "containerPort": bad}])
        pod["spec"]["containers"].pop(0)
        assert progress_port(pod) == constants.PROGRESS_PORT


def test_rendered_host_network_pod_is_polled_on_its_own_port(job_obj):
    """A hostNetwork job listens on a per-job port; the pod index keeps it and the poll uses it."""
    from phalanx.podreflector import pod_entry
    from phalanx.render.network import NetworkWiring, apply_network

    sim = Sim(job_obj)
    sim.step()
    pod = next(p for p in sim.pods.values() if p["metadata"]["labels"][constants.LABEL_NODE_RANK] == "0")
    assert progress_port(pod_entry(pod)) == constants.PROGRESS_PORT
    wiring = NetworkWiring(host_network=True, master_port=23455, progress_port=23456, metrics_port=23457)
    moved = apply_network(pod, wiring)
    env = {e["name"]: e.get("value") for e in moved["spec"]["containers"][0]["env"]}
    assert env[constants.ENV_PROGRESS_PORT] == "23456"
    assert progress_port(pod_entry(moved)) == 23456


# ----------------------------------------------------------------- decide() never breaks


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_decide_with_a_hostile_report_writes_a_valid_status(job_obj, name):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 3, "loss": 4.0})
    plan = sim.step(progress=HOSTILE_BODIES[name])
    json.dumps(plan.status, allow_nan=False)  # what the API server must accept
    assert sim.status["phase"] == "Running" and sim.status["step"] in (3, 5)


def test_hostile_report_cannot_stop_suspend(job_obj):
    """Before: a malformed lastCheckpoint raised in decide(), so suspend (and every later check)
    never ran while it was reported."""
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.obj["spec"]["suspend"] = True
    sim.step(progress={"step": 5, "lastCheckpoint": {"step": "x", "path": ["/"]}, "loss": "NaN"})
    assert sim.status["phase"] == "Suspended" and sim.pods == {}


def test_observed_progress_may_be_raw_bytes(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    obj = copy.deepcopy(sim.obj)
    plan = decide(obj, Observed(pods=list(sim.pods.values()), progress=json.dumps(GOOD).encode()), T0)
    assert plan.status["step"] == 12 and plan.status["lastCheckpoint"]["step"] == 10


# ------------------------------------------------------- any code's record: epoch, metrics, resumedStep


@pytest.mark.parametrize(("body", "kept", "problem"), [
    ({"step": 3, "epoch": 1.5}, {"step": 3, "epoch": 1.5}, None),
    ({"step": 3, "epoch": -1}, {"step": 3}, "epoch"),
    ({"step": 3, "resumedStep": 2}, {"step": 3, "resumedStep": 2}, None),
    ({"step": 3, "resumedStep": 2.5}, {"step": 3}, "resumedStep"),
    ({"step": 3, "resumedStep": True}, {"step": 3}, "resumedStep"),
    ({"metrics": {"eval_loss": 2.5, "lr": 3, "eval/acc-top.1": -0.5}},
     {"metrics": {"eval_loss": 2.5, "lr": 3.0, "eval/acc-top.1": -0.5}}, None),
    ({"metrics": {}}, {"metrics": {}}, None),
    ({"metrics": [1, 2]}, {}, "metrics: invalid value"),
    ({"metrics": "eval_loss=2"}, {}, "metrics: invalid value"),
    ({"metrics": {"ok": 1.0, "nan": math.nan, "inf": math.inf, "-inf": -math.inf}}, {"metrics": {"ok": 1.0}},
     "dropped 'nan', 'inf', '-inf'"),
    ({"metrics": {"ok": 1, "flag": True, "text": "1.0", "none": None, "nested": {"a": 1}, "list": [1]}},
     {"metrics": {"ok": 1.0}}, "dropped 'flag', 'text', 'none', 'nested', 'list'"),
    ({"metrics": {"9lives": 1, "has space": 2, "x" * 65: 3, "eval_loss\n": 4, "\u00e9": 5, "": 6}}, {"metrics": {}},
     "dropped '9lives', 'has space', 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', 'eval_loss\\n', '\u00e9' and 1 more"),
    ({"metrics": {"big": 1e16, "huge": 10**400, "fine": -1e15}}, {"metrics": {"fine": -1e15}}, "dropped 'big', 'huge'"),
    ({"metrics": {f"m{i}": i for i in range(40)}}, {"metrics": {f"m{i}": float(i) for i in range(32)}},
     "dropped 'm32', 'm33', 'm34', 'm35', 'm36' and 3 more"),
])
def test_reported_metrics_epoch_and_resumed_step(body, kept, problem):
    problems: list[str] = []
    assert parse_progress(body, problems) == kept
    assert (problems == []) if problem is None else (len(problems) == 1 and problem in problems[0])
    json.dumps(kept, allow_nan=False)


def test_hostile_metrics_bodies_stay_bounded():
    many = json.dumps({"step": 1, "metrics": {f"m{i}": i for i in range(3000)}}).encode()  # under MAX_BYTES
    problems: list[str] = []
    report = parse_progress(many, problems)
    assert len(report["metrics"]) == constants.MAX_REPORTED_METRICS and len(problems[0]) < 400
    nested = b'{"step": 1, "metrics": {"a": {"b": {"c": {"d": 1}}}}}'
    assert parse_progress(nested) is None  # deeper than MAX_DEPTH: the whole report is refused
    huge_name = json.dumps({"step": 1, "metrics": {"n" * 50_000: 1}}).encode()
    problems = []
    assert parse_progress(huge_name, problems) == {"step": 1, "metrics": {}} and len(problems[0]) < 400


COMMAND_JOB = {"model": None, "command": ["python", "train.py"], "progress": {"collector": "huggingface"}}


def command_sim(job_obj):
    job_obj["spec"].update(COMMAND_JOB)
    del job_obj["spec"]["model"]
    sim = Sim(job_obj)
    sim.run_until_running()
    return sim


def test_a_command_jobs_total_is_its_scripts(job_obj):
    sim = command_sim(job_obj)
    assert "totalSteps" not in sim.status  # not training.steps: the script did not say yet
    sim.step(progress={"step": 10, "totalSteps": 40, "loss": 2.0, "stepTimeSeconds": 0.5})
    assert (sim.status["step"], sim.status["totalSteps"], sim.status["progressPercentage"]) == (10, 40, 25)
    assert sim.status["estimatedRemainingSeconds"] == 15 and sim.status["loss"] == 2.0
    sim.step(progress={"step": 20})  # a report without totalSteps keeps the last one
    assert (sim.status["totalSteps"], sim.status["progressPercentage"]) == (40, 50)


def test_a_command_job_without_a_total_has_no_eta(job_obj):
    sim = command_sim(job_obj)
    sim.step(progress={"step": 10, "loss": 2.0, "stepTimeSeconds": 0.5})
    assert sim.status["step"] == 10 and "estimatedRemainingSeconds" not in sim.status  # not "0 s left"
    assert "progressPercentage" not in sim.status


def test_a_built_in_jobs_total_stays_training_steps(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 10, "totalSteps": 999})
    assert sim.status["totalSteps"] == job_obj["spec"].get("training", {}).get("steps", 100)


def test_metrics_keep_each_last_value(job_obj):
    sim = command_sim(job_obj)
    sim.step(progress={"step": 1, "metrics": {"learning_rate": 1e-4, "grad_norm": 2.0}})
    sim.step(progress={"step": 2, "metrics": {"eval_loss": 1.5, "grad_norm": 1.0}})
    assert sim.status["metrics"] == {"eval_loss": 1.5, "grad_norm": 1.0, "learning_rate": 1e-4}
    json.dumps(sim.status, allow_nan=False)


@pytest.mark.parametrize(("before", "reported", "after"), [
    (None, {"a": 1.0}, {"a": 1.0}),
    ({"a": 1.0, "b": 2.0}, {"b": 3.0}, {"b": 3.0, "a": 1.0}),
    ({f"old{i}": 0.0 for i in range(32)}, {"new": 1.0}, {"new": 1.0, **{f"old{i}": 0.0 for i in range(31)}}),
])
def test_merged_metrics_are_bounded_newest_first(before, reported, after):
    assert merged_metrics(before, reported) == after
    assert list(merged_metrics(before, reported)) == list(after)


def test_resumed_step_is_said_once_per_attempt(job_obj):
    sim = command_sim(job_obj)
    sim.step(progress={"step": 101, "resumedStep": 100})
    sim.step(progress={"step": 102, "resumedStep": 100})
    assert sim.status["resumedStep"] == 100
    assert sim.status["message"] == "all 2 nodes running; resumed from step 100"
    resumed = [e for e in sim.events if e[1] == constants.Reason.RESUMED_FROM_CHECKPOINT]
    assert resumed == [("Normal", "ResumedFromCheckpoint", "resumed from step 100")]
    sim.set_pods("Failed", ready=False, exit_code=137, only=1)  # a retryable failure: a new attempt
    sim.step()
    assert sim.status["phase"] == "Restarting" and "resumedStep" not in sim.status
    sim.now += timedelta(minutes=5)
    sim.run_until_running()
    sim.step(progress={"step": 101, "resumedStep": 100})  # the same checkpoint again: said again
    assert [e[2] for e in sim.events if e[1] == constants.Reason.RESUMED_FROM_CHECKPOINT] == ["resumed from step 100"] * 2
    assert sim.status["message"].endswith("; resumed from step 100")


def test_a_resumed_step_that_keeps_changing_is_one_event_per_attempt(job_obj):
    sim = command_sim(job_obj)
    for resumed in (100, 200, 100, 200):  # rank 0's report is the script's: it may say anything
        sim.step(progress={"step": 300, "resumedStep": resumed})
    assert sim.status["resumedStep"] == 200 and sim.status["message"].endswith("; resumed from step 200")
    assert [e[2] for e in sim.events if e[1] == constants.Reason.RESUMED_FROM_CHECKPOINT] == ["resumed from step 100"]


# ------------------------------------------------------------------------ the start-up timeline

FULL_STARTUP = {phase.value: float(i) for i, phase in enumerate(constants.StartupPhase)}


@pytest.mark.parametrize(("startup", "kept"), [
    ({"launcher": 0.4, "imports": 3.25, "firstStep": 20}, {"launcher": 0.4, "imports": 3.25, "firstStep": 20.0}),
    (FULL_STARTUP, FULL_STARTUP),
    ({"firstStep": 9.0, "launcher": 0.5}, {"launcher": 0.5, "firstStep": 9.0}),  # the phases' order
    ({"imports": 1.23456}, {"imports": 1.23}),
    ({}, {}),
    ({"bogus": 1.0, "x" * 10_000: 2.0, "Imports": 3.0}, {}),  # no phase of the runtime's
    ({"launcher": -1, "agent": math.nan, "worker": math.inf, "imports": True, "mesh": "2", "model": None,
      "optimizer": [1], "data": {"a": 1}, "checkpoint": 10**400, "metrics": 1e9, "firstStep": 7.0},
     {"firstStep": 7.0}),
])
def test_the_startup_timeline_keeps_known_phases_with_sane_seconds(startup, kept):
    problems: list[str] = []
    report = parse_progress({"step": 1, "startup": startup}, problems)
    assert report == {"step": 1, "startup": kept} and problems == []
    assert list(report["startup"]) == list(kept)
    json.dumps(report, allow_nan=False)


@pytest.mark.parametrize("startup", [[1, 2], "imports=3", 5])
def test_a_startup_timeline_that_is_no_mapping_is_dropped(startup):
    problems: list[str] = []
    assert parse_progress({"step": 1, "startup": startup}, problems) == {"step": 1}
    assert len(problems) == 1 and problems[0].startswith("startup: invalid value")


def test_a_hostile_startup_timeline_stays_bounded():
    body = json.dumps({"step": 1, "startup": {f"p{i}": i for i in range(3000)} | {"model": 3}}).encode()
    assert len(body) < MAX_BYTES
    assert parse_progress(body) == {"step": 1, "startup": {"model": 3.0}}


def test_the_startup_timeline_goes_into_the_status(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 0, "startup": {"launcher": 0.5, "model": 4.0}})
    assert sim.status["startup"] == {"launcher": 0.5, "model": 4.0}
    sim.step(progress={"step": 1, "startup": {"launcher": 0.5, "model": 4.0, "firstStep": 6.5}})
    assert sim.status["startup"] == {"launcher": 0.5, "model": 4.0, "firstStep": 6.5}
    sim.step(progress={"step": 2})  # a record without one keeps the last
    assert sim.status["startup"]["firstStep"] == 6.5


@pytest.mark.parametrize(("status", "report", "restarted"), [
    ({"step": 7}, {"step": 8}, True),  # a new step
    ({"step": 7}, {"step": 7}, False),  # the same step again
    ({"step": 0}, {"phase": "Preparing", "step": 0}, True),  # data.prepare: no steps, the clock starts again
    ({"step": 40}, {"phase": "Exporting", "step": 40}, True),  # the in-job export, likewise
    ({"step": 40}, {"phase": "Succeeded", "step": 40}, False),
])
def test_the_hang_clock_restarts_on_a_step_or_a_phase_without_steps(status, report, restarted):
    from datetime import UTC, datetime

    from phalanx.lifecycle.progress import apply_progress
    from phalanx.lifecycle.status import StatusView

    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    view = StatusView({"phase": "Running", "lastProgressTime": "2026-01-01T11:00:00Z", **status}, 1, now)
    apply_progress(view, report, 100, "uid")
    assert (view.status.last_progress_time != "2026-01-01T11:00:00Z") is restarted
