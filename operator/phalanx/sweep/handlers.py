"""kopf wiring of TrainingSweeps only: an index of trial TrainingJobs by sweep, a wake-up on a
trial's change, one daemon per sweep that runs its loop (sweep/loop.py). No decisions here.

Registered by importing this module next to phalanx.handlers (phalanx.main). The operator's
config, API client, leader elector and the sweeps' wake-ups come from kopf's memo (``memo.config``,
``memo.kube``, ``memo.leader``, ``memo.sweep_wakeups``: see phalanx.startup.new_memo; its
startup handler fills in the defaults).
"""

from __future__ import annotations

from typing import Any

import kopf

from phalanx import constants
from phalanx.sweep.loop import run_sweep


def _slim_trial(body: kopf.Body) -> dict[str, Any]:
    meta, status = body["metadata"], body.get("status") or {}
    keep = ("phase", "step", "totalSteps", "loss", "tokensPerSecond", "metrics", "message", "lastCheckpoint")
    return {
        "metadata": {"name": meta["name"], "uid": meta.get("uid"), "labels": dict(meta.get("labels") or {}),
                     "ownerReferences": [{"uid": o.get("uid"), "controller": o.get("controller")}
                                         for o in meta.get("ownerReferences") or []]},
        "spec": {"suspend": bool((body.get("spec") or {}).get("suspend"))},
        "status": {**{k: status[k] for k in keep if k in status},
                   "conditions": [{"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason")}
                                  for c in status.get("conditions") or []
                                  if c.get("type") in (constants.COND_SCHEDULABLE, constants.COND_LOSS_NOT_FINITE)]},
    }


@kopf.index(constants.GROUP, constants.VERSION, constants.PLURAL, labels={constants.LABEL_SWEEP: kopf.PRESENT})
def sweep_trials(namespace: str, labels: dict[str, str], body: kopf.Body, **_: Any) -> dict:
    return {(namespace, labels[constants.LABEL_SWEEP]): _slim_trial(body)}


@kopf.on.event(constants.GROUP, constants.VERSION, constants.PLURAL, labels={constants.LABEL_SWEEP: kopf.PRESENT})
async def trial_changed(namespace: str, labels: dict[str, str], memo: kopf.Memo, **_: Any) -> None:
    """Wake the sweep's loop; no entry is made for a sweep without one (trials outlive sweeps).
    Async: on the event loop, where the loop's wake-up event lives (kopf runs a sync handler in a
    thread)."""
    memo.sweep_wakeups.wake((namespace, labels[constants.LABEL_SWEEP]))


@kopf.daemon(constants.GROUP, constants.VERSION, constants.SWEEP_PLURAL, cancellation_timeout=10.0)
async def sweep_loop(name: str, namespace: str, body: kopf.Body, stopped: kopf.DaemonStopped,
                     sweep_trials: kopf.Index, memo: kopf.Memo, **kwargs: Any) -> None:
    await run_sweep(memo, namespace, name, body, stopped, sweep_trials, kwargs.get("namespace_labels"))
