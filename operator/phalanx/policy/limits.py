"""Bounded work per object (pure): a spec nested deeper than any field of the API, or larger than
the admin's limit, is refused before it is parsed further; so is a sweep whose check would
validate more trial bytes than the limit allows. Each refusal names the field and the limit."""

from __future__ import annotations

import json
from typing import Any

from phalanx.api.config import Limits
from phalanx.problems import Problem
from phalanx.safejson import TOO_DEEP, cut_path, depth_exceeds

# No TrainingJob or TrainingSweep field nests deeper than ~20 levels (a sweep's template's
# ephemeral volume's claim's selector's expression): 32 refuses nothing real.
MAX_SPEC_DEPTH = 32


def _p(field: str, message: str) -> Problem:
    return Problem(field, message, "operator")


def spec_size_problems(obj: Any, limits: Limits) -> list[Problem]:
    """Depth first (measuring the size of a deep object would recurse), then the size."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return []
    deep = depth_exceeds(spec, MAX_SPEC_DEPTH)
    text = json.dumps(spec, separators=(",", ":"), default=str) if deep is None else ""  # default: YAML dates
    if deep is None and TOO_DEEP in text:  # decoded with its deep part cut off (phalanx.safejson)
        deep = cut_path(spec)
    if deep is not None:
        return [_p(f"spec.{_short(deep)}", f"nested deeper than {MAX_SPEC_DEPTH} levels; no field of the API nests like that")]
    size = len(text)
    if size > limits.max_spec_bytes:
        return [_p("spec", f"{size} bytes as JSON; at most {limits.max_spec_bytes} (operator limits.maxSpecBytes)")]
    return []


def _short(path: str, keep: int = 80) -> str:
    return path if len(path) <= keep else path[:keep] + "..."


def sweep_check_problems(trials: int, template: dict[str, Any], limits: Limits) -> list[Problem]:
    """A sweep's check validates each trial as a whole TrainingJob: bound trials × template bytes."""
    size = len(json.dumps(template, separators=(",", ":")))
    if trials * size > limits.max_sweep_check_bytes:
        most = max(limits.max_sweep_check_bytes // max(size, 1), 0)
        return [_p("spec.maxTrials", f"{trials} trials of a {size}-byte template are more than the operator checks "
                   f"({limits.max_sweep_check_bytes} bytes, limits.maxSweepCheckBytes): at most {most} trials of this template")]
    return []
