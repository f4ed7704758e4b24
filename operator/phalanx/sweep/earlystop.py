"""Early-stopping rules, pure: which trial to stop, from the values the sweep recorded at step
milestones (the objective metric the first time each trial was seen at or past a milestone).

- median (the median stopping rule, as Katib and Vizier): at a milestone, a trial whose value is
  worse than the median of the other trials' values at that milestone stops, once at least
  ``minTrials`` others have one.
- asha (asynchronous successive halving, stop-based, as Ray Tune's ASHA scheduler): rungs at
  ``graceSteps × reductionFactor^k``; a trial reaching a rung continues only if its value is in
  the top ``1/reductionFactor`` of every value recorded at that rung so far (its own included).

Both decide when a trial's value at a milestone is first recorded, against what the other trials
recorded there by then; never before ``graceSteps``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from phalanx.api.sweep import MAX_MILESTONES, EarlyStopping, Goal, StopRule


def milestones(rule: EarlyStopping, total_steps: int) -> list[int]:
    """The steps at which a trial's value is recorded (and judged), below ``total_steps``."""
    out: list[int] = []
    if rule.rule == StopRule.MEDIAN:
        interval = rule.interval_steps or rule.grace_steps
        step = rule.grace_steps
        while step < total_steps and len(out) < MAX_MILESTONES:
            out.append(step)
            step += interval
    elif rule.rule == StopRule.ASHA:
        step = rule.grace_steps
        while step < total_steps and len(out) < MAX_MILESTONES:
            out.append(step)
            step *= rule.reduction_factor
    return out


def better(goal: str, a: float, b: float) -> bool:
    return a < b if goal == Goal.MINIMIZE else a > b


def median_verdict(goal: str, value: float, others: list[float], min_trials: int) -> str | None:
    """Why to stop a trial with ``value`` given the other trials' values at the same milestone."""
    if len(others) < min_trials:
        return None
    median = statistics.median(others)
    if better(goal, median, value):
        return f"{value:.6g} is worse than the median {median:.6g} of {len(others)} other trials"
    return None


def asha_verdict(goal: str, value: float, at_rung: list[float], eta: int) -> str | None:
    """Why to stop a trial with ``value`` given every value at its rung (its own included)."""
    keep = math.ceil(len(at_rung) / eta)
    ahead = sum(1 for v in at_rung if better(goal, v, value))
    if ahead >= keep:
        return f"{value:.6g} is not in the top 1/{eta} at this rung ({ahead} of {len(at_rung)} trials are better; {keep} continue)"
    return None


def verdict(rule: EarlyStopping, goal: str, name: str, new: Iterable[int],
            values: dict[str, dict[int, float]]) -> str | None:
    """Why to stop trial ``name`` now (None: let it run). ``new``: milestones it reached in this
    pass; ``values``: every trial's recorded value per milestone (this one's included)."""
    own = values.get(name, {})
    for step in sorted(new):
        if step < rule.grace_steps or step not in own:
            continue
        others = [v[step] for n, v in values.items() if n != name and step in v]
        if rule.rule == StopRule.MEDIAN:
            why = median_verdict(goal, own[step], others, rule.min_trials)
        elif rule.rule == StopRule.ASHA:
            why = asha_verdict(goal, own[step], others + [own[step]], rule.reduction_factor)
        else:
            why = None
        if why:
            return f"at step {step}: {why}"
    return None
