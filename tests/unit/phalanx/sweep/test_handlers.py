"""The sweep's kopf wiring (phalanx/sweep/handlers.py): what its index keeps of a trial, under
which key, and whom a trial's change wakes."""

from __future__ import annotations

import asyncio

from phalanx import constants, startup
from phalanx.sweep import handlers

TRIAL = {
    "metadata": {"name": "lr-sweep-0", "namespace": "ml", "uid": "trial-uid", "resourceVersion": "7",
                 "labels": {constants.LABEL_SWEEP: "lr-sweep", "team": "a"},
                 "annotations": {"big": "x" * 1000},
                 "ownerReferences": [{"uid": "sweep-uid", "controller": True, "kind": "TrainingSweep", "name": "lr-sweep"}]},
    "spec": {"image": "phalanx/runtime:dev", "nodes": 8, "suspend": True},
    "status": {"phase": "Running", "step": 12, "totalSteps": 40, "loss": 3.5, "tokensPerSecond": 900.0,
               "metrics": {"eval_loss": 3.7}, "resumedStep": 10, "message": "m", "lastCheckpoint": {"step": 10},
               "placement": {"n0": 0}, "readyNodes": 8,
               "conditions": [{"type": constants.COND_SCHEDULABLE, "status": "True", "reason": "Placed",
                               "message": "long", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                              {"type": constants.COND_LOSS_NOT_FINITE, "status": "False", "reason": "Finite"},
                              {"type": "Running", "status": "True", "reason": "AllNodesReady"}]},
}


def test_the_index_keeps_what_the_sweep_decides_on_and_nothing_else():
    slim = handlers._slim_trial(TRIAL)
    assert slim == {
        "metadata": {"name": "lr-sweep-0", "uid": "trial-uid",
                     "labels": {constants.LABEL_SWEEP: "lr-sweep", "team": "a"},
                     "ownerReferences": [{"uid": "sweep-uid", "controller": True}]},
        "spec": {"suspend": True},
        "status": {"phase": "Running", "step": 12, "totalSteps": 40, "loss": 3.5, "tokensPerSecond": 900.0,
                   "metrics": {"eval_loss": 3.7}, "message": "m", "lastCheckpoint": {"step": 10},
                   "conditions": [{"type": constants.COND_SCHEDULABLE, "status": "True", "reason": "Placed"},
                                  {"type": constants.COND_LOSS_NOT_FINITE, "status": "False", "reason": "Finite"}]},
    }


def test_a_new_trial_without_spec_or_status_is_indexed():
    slim = handlers._slim_trial({"metadata": {"name": "t"}})
    assert slim["spec"] == {"suspend": False} and slim["status"] == {"conditions": []}
    assert slim["metadata"] == {"name": "t", "uid": None, "labels": {}, "ownerReferences": []}


def test_trials_are_indexed_by_their_sweep():
    key = ("ml", "lr-sweep")
    entry = handlers.sweep_trials(namespace="ml", labels=TRIAL["metadata"]["labels"], body=TRIAL)
    assert list(entry) == [key] and entry[key]["metadata"]["name"] == "lr-sweep-0"


def test_a_trials_change_wakes_its_sweeps_loop_only():
    memo = startup.new_memo()
    wake = memo.sweep_wakeups.wakeup(("ml", "lr-sweep"))
    asyncio.run(handlers.trial_changed(namespace="ml", labels={constants.LABEL_SWEEP: "gone"}, memo=memo))  # a deleted sweep's trial
    assert not wake.is_set() and list(memo.sweep_wakeups.events) == [("ml", "lr-sweep")]
    asyncio.run(handlers.trial_changed(namespace="ml", labels={constants.LABEL_SWEEP: "lr-sweep"}, memo=memo))
    assert wake.is_set()
    memo.decider.shutdown()
