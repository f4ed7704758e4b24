"""bench/recovery.py's pure parts: replaying the pod watch and the recovery predicates."""

from bench.recovery import (
    PodEvent,
    all_asked,
    first_time,
    kwok_tables,
    last_replacement,
    new_gang_running,
    replaced,
    replay,
)


def ev(t, name, uid, phase="Running", kind="MODIFIED", requested=0, restarts=0):
    return PodEvent(t, kind, name, uid, phase, f"node-{name}", requested, restarts)


OLD = [ev(1, "a", "a1"), ev(1, "b", "b1")]


def test_replay_keeps_each_pods_last_event_and_drops_deleted_ones():
    events = [*OLD, ev(2, "a", "a1", phase="Failed"), ev(3, "b", "b1", kind="DELETED")]
    assert {u: p.phase for u, p in replay(events, 2.5).items()} == {"a1": "Failed", "b1": "Running"}
    assert set(replay(events, 3)) == {"a1"}


def test_a_new_gang_is_running_once_every_new_pod_runs():
    # the same names come back with new UIDs; the old pods running do not count
    events = [*OLD, ev(2, "a", "a1", kind="DELETED"), ev(2, "b", "b1", kind="DELETED"),
              ev(3, "a", "a2", phase="Pending"), ev(4, "b", "b2"), ev(5, "a", "a2")]
    assert first_time(events, 1.5, new_gang_running(2, {"a1", "b1"})) == 5
    assert first_time(OLD, 0, new_gang_running(2, {"a1", "b1"})) is None


def test_in_place_is_over_once_every_pod_restarted_or_was_asked_while_running():
    events = [*OLD, ev(2, "a", "a1", restarts=1), ev(3, "b", "b1", requested=1)]
    assert first_time(events, 1.5, all_asked(2, 1, {"a1", "b1"})) == 3
    # a pod that failed instead is no in-place restart
    failed = [*OLD, ev(2, "a", "a1", restarts=1), ev(3, "b", "b1", requested=1, phase="Failed")]
    assert first_time(failed, 1.5, all_asked(2, 1, {"a1", "b1"})) is None


def test_a_replacement_is_one_new_pod_running_beside_the_kept_ones():
    events = [*OLD, ev(2, "b", "b1", kind="DELETED"), ev(4, "b", "b2")]
    assert first_time(events, 1.5, replaced(2, {"a1", "b1"})) == 4


def test_the_table_has_a_row_per_trial_and_scale_and_names_failed_trials():
    ok = {"trial": "recreate", "pods": 64, "recover_s": 2.0, "detect_s": 0.5, "pods_kept": 0, "loadavg": [1.5]}
    text = kwok_tables([ok, {**ok, "recover_s": 4.0}, {"trial": "hang", "pods": 512, "error": "timed out"}])
    assert "| process exit (137) | recreate | 64 | 3.00 (2.00, 4.00) | 0/64 | 0.50 |" in text
    assert "failed: timed out" in text


def test_the_replacement_reported_is_the_newest_status_that_has_one():
    history = [(1.0, {}), (2.0, {"nodeReplacement": {"newNode": "n1", "done": False}}),
               (3.0, {"nodeReplacement": {"newNode": "n1", "domain": "block=b0", "done": True}}), (4.0, {"step": 5})]
    assert last_replacement(history) == {"newNode": "n1", "domain": "block=b0", "message": None}
    assert last_replacement([(1.0, {})])["newNode"] is None
