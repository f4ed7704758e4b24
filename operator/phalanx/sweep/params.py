"""A sweep's trials, as a pure function of its spec: parameter paths resolved against the
TrainingJob spec model (or ``env.NAME``: one variable of the trainer's ``spec.env``), values
sampled (grid, random with a seed, an explicit list; ensembles multiply each configuration by N
seeds), each trial's spec built from the template.

Deterministic: the same spec always gives the same trials in the same order (trial ``i`` is
named ``<sweep>-<i>``), so a restarted operator re-derives exactly what it created before.
"""

from __future__ import annotations

import copy
import enum
import itertools
import json
import math
import random
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from phalanx.api.kubetypes import EnvVar
from phalanx.api.rules import broken_rules
from phalanx.api.sweep import (
    ENV_PARAMETER_NAME,
    ENV_PARAMETER_PREFIX,
    MAX_TRIALS,
    Algorithm,
    Scale,
    TrainingSweepSpec,
)
from phalanx.api.types import TrainingJobSpec

SEED_PATH = "training.seed"
ENV = "env"  # the Leaf kind of an env.NAME parameter


@dataclass(frozen=True)
class Leaf:
    """What a parameter path names: a scalar field of the TrainingJob spec, or an env variable."""

    path: str
    # "int", "float", "bool", "str" (enums, literals and quantities are "str"-like); ENV: an env
    # variable, any value (set as text), a range sampled as for a float field
    kind: str
    choices: tuple[str, ...] = ()  # enum / literal values, for the messages


@dataclass(frozen=True)
class Trial:
    index: int
    name: str
    parameters: dict[str, Any]  # path → value (an ensemble's training.seed included)
    spec: dict[str, Any]  # the trial's TrainingJob spec, wire form (camelCase)
    source: str  # where its values come from, for messages: "spec.parameters" or "spec.trials[3]"

    def label(self) -> str:
        values = ", ".join(f"{k}={_show(v)}" for k, v in self.parameters.items())
        return f"trial {self.index} ({values})" if values else f"trial {self.index}"


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)


def trial_name(sweep: str, index: int) -> str:
    return f"{sweep}-{index}"


# --- Paths ----------------------------------------------------------------------------------


def _unwrap(annotation: Any) -> list[Any]:
    """The non-None members of ``X | None`` / Annotated[...] (one element for a plain type)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                out += _unwrap(arg)
        return out
    return [annotation]


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    return {(info.alias or name): info for name, info in model.model_fields.items()}


def env_name(path: str) -> str | None:
    """The variable an ``env.NAME`` path sets (None: a spec field path)."""
    return path[len(ENV_PARAMETER_PREFIX):] if path.startswith(ENV_PARAMETER_PREFIX) else None


def env_text(value: Any) -> str:
    """A parameter value as an env variable's text: strings as they are, numbers and booleans as
    JSON writes them (0.001, 1e-05, 3, true), which float(), int() and json.loads() read back."""
    return value if isinstance(value, str) else json.dumps(value)


def _resolve_env(path: str, name: str) -> Leaf | str:
    if not re.fullmatch(ENV_PARAMETER_NAME, name):
        return (f"spec.env: {path} names one environment variable, NAME of letters, digits and '_' "
                "(not starting with a digit), e.g. env.LR")
    try:
        var = EnvVar.model_validate({"name": name, "value": ""})
    except ValidationError as exc:  # longer than an env name may be (a list trial's key is unbounded)
        return f"spec.env: {name[:64]}…: {exc.errors()[0]['msg']}"
    broken = next(broken_rules(var, ""), None)  # PHALANX_*, the rendezvous, device-plugin variables
    return Leaf(path, ENV) if broken is None else f"spec.env: {name}: {broken[1]}"


def resolve_path(path: str) -> Leaf | str:
    """The scalar field ``path`` names in the TrainingJob spec (or the env variable of an
    ``env.NAME`` path), or why it names none."""
    name = env_name(path)
    if name is not None:
        return _resolve_env(path, name)
    model: type[BaseModel] = TrainingJobSpec
    parts = path.split(".")
    where = "spec"
    for i, part in enumerate(parts):
        fields = _fields(model)
        info = fields.get(part)
        if info is None:
            return f"unknown field {part!r} in {where}; known: {', '.join(fields)}"
        members = _unwrap(info.annotation)
        where = f"{where}.{part}"
        last = i == len(parts) - 1
        sub = next((m for m in members if isinstance(m, type) and issubclass(m, BaseModel)), None)
        if sub is not None:
            if last:
                return f"{where} is an object; name one of its fields: {', '.join(_fields(sub))}"
            model = sub
            continue
        if not last:
            return f"{where} is not an object (nothing under it to set)"
        return _leaf(path, where, members)
    return f"{where}: empty path"  # pragma: no cover - the pattern refuses empty paths


def _leaf(path: str, where: str, members: list[Any]) -> Leaf | str:
    kinds: list[str] = []
    choices: list[str] = []
    for m in members:
        origin = typing.get_origin(m)
        if origin is typing.Literal:
            kinds.append("str")
            choices += [str(a) for a in typing.get_args(m)]
        elif isinstance(m, type) and issubclass(m, enum.Enum):
            kinds.append("str")
            choices += [str(e.value) for e in m]
        elif m is bool:
            kinds.append("bool")
        elif m is int:
            kinds.append("int")
        elif m is float:
            kinds.append("float")
        elif m is str:
            kinds.append("str")
        elif origin in (list, dict) or m in (list, dict):
            env_hint = f" (one variable: {ENV_PARAMETER_PREFIX}NAME)" if where == "spec.env" else ""
            return f"{where} is a {'list' if (origin or m) is list else 'map'}; a parameter sets one scalar field{env_hint}"
        else:
            return f"{where} cannot be a sweep parameter"
    if "float" in kinds:
        kind = "float"
    elif "int" in kinds:
        kind = "int"
    else:
        kind = kinds[0] if kinds else "str"
    return Leaf(path, kind, tuple(choices))


def set_path(spec: dict[str, Any], path: str, value: Any) -> None:
    """Set ``path`` in a wire-form spec; ``env.NAME`` replaces the entry of spec.env named NAME
    (a value or a valueFrom) with the value as text, or appends one."""
    name = env_name(path)
    if name is not None:
        env = spec.setdefault("env", [])
        entry = {"name": name, "value": env_text(value)}
        at = next((i for i, e in enumerate(env) if e.get("name") == name), None)
        if at is None:
            env.append(entry)
        else:
            env[at] = entry
        return
    node = spec
    parts = path.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def get_path(spec: dict[str, Any], path: str) -> Any:
    name = env_name(path)
    if name is not None:
        return next((e.get("value") for e in spec.get("env") or [] if e.get("name") == name), None)
    node: Any = spec
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


# --- Sampling -------------------------------------------------------------------------------


def _number(kind: str, x: float) -> int | float:
    return int(round(x)) if kind == "int" else float(f"{x:.6g}")


def sample_range(rng: random.Random, lo: float, hi: float, scale: str, kind: str) -> int | float:
    """One value in [lo, hi]: uniform or log-uniform; integer fields get whole numbers in range."""
    if kind == "int":
        lo, hi = math.ceil(lo), math.floor(hi)
        if lo > hi:
            raise ValueError("the range holds no whole number")
    if scale == Scale.LOG:
        x = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    else:
        x = rng.uniform(lo, hi)
    return min(max(_number(kind, x), lo), hi) if kind == "int" else _number(kind, x)


def assignments(spec: TrainingSweepSpec, kinds: dict[str, str]) -> Iterator[tuple[dict[str, Any], str]]:
    """Each configuration (path → value) and where its values come from, in trial order
    (before ensembles and maxTrials). Lazy: a huge grid is never materialised."""
    algo = spec.algorithm
    if algo == Algorithm.LIST:
        for i, trial in enumerate(spec.trials or []):
            yield dict(trial), f"spec.trials[{i}]"
    elif algo == Algorithm.GRID:
        if not spec.parameters:
            yield {}, "spec"
            return
        paths = [p.path for p in spec.parameters]
        for combo in itertools.product(*[p.values or [] for p in spec.parameters]):
            yield dict(zip(paths, combo, strict=True)), "spec.parameters"
    else:  # random: maxTrials samples from one seeded generator
        rng = random.Random(spec.seed)
        while True:
            out: dict[str, Any] = {}
            for p in spec.parameters:
                if p.values is not None:
                    out[p.path] = rng.choice(p.values)
                else:
                    assert p.range is not None
                    out[p.path] = sample_range(rng, p.range.min, p.range.max, p.range.scale, kinds.get(p.path, "float"))
            yield out, "spec.parameters"


def count_configurations(spec: TrainingSweepSpec) -> int | None:
    """How many configurations the spec defines (None: unbounded, i.e. random)."""
    if spec.algorithm == Algorithm.LIST:
        return len(spec.trials or [])
    if spec.algorithm == Algorithm.GRID:
        return math.prod(len(p.values or []) for p in spec.parameters) if spec.parameters else 1
    return None


def total_trials(spec: TrainingSweepSpec) -> int | None:
    configs = count_configurations(spec)
    seeds = spec.ensemble.size if spec.ensemble else 1
    unbounded = None if configs is None else configs * seeds
    if spec.max_trials is not None:
        return spec.max_trials if unbounded is None else min(unbounded, spec.max_trials)
    return unbounded


def expand(sweep_name: str, spec: TrainingSweepSpec, kinds: dict[str, str]) -> list[Trial]:
    """Every trial, in order. The caller checks ``total_trials(spec) <= MAX_TRIALS`` first."""
    limit = total_trials(spec)
    assert limit is not None and limit <= MAX_TRIALS
    template = spec.template.spec.model_dump(by_alias=True, mode="json", exclude_none=True)
    seeds = spec.ensemble.size if spec.ensemble else 1
    first_seed = (spec.ensemble.first_seed if spec.ensemble and spec.ensemble.first_seed is not None
                  else spec.template.spec.training.seed)
    trials: list[Trial] = []
    for config, source in assignments(spec, kinds):
        for k in range(seeds):
            if len(trials) >= limit:
                return trials
            parameters = dict(config)
            if spec.ensemble:
                parameters[SEED_PATH] = first_seed + k
            trial_spec = copy.deepcopy(template)
            for path, value in parameters.items():
                set_path(trial_spec, path, value)
            index = len(trials)
            trials.append(Trial(index, trial_name(sweep_name, index), parameters, trial_spec, source))
    return trials
