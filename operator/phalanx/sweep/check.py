"""One verdict on a TrainingSweep, the same in `phalanx validate|local` and the operator: the API
server's (schema, CEL rules), then every parameter path and value, then every generated trial
checked as the TrainingJob it becomes (phalanx.validate.validate_job). Pure; never raises.
A problem names the parameter and the value (or the trial and its values)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from phalanx import constants
from phalanx.api import patterns
from phalanx.api.config import OperatorConfig
from phalanx.api.rules import broken_rules
from phalanx.api.sweep import (
    MAX_SWEEP_NAME,
    MAX_TRIALS,
    OPERATOR_RULES,
    PARAMETER_PATH,
    TrainingSweep,
)
from phalanx.policy.cluster import sweep_policy_problems
from phalanx.policy.limits import spec_size_problems, sweep_check_problems
from phalanx.problems import Problem
from phalanx.sweep.params import ENV, Leaf, Trial, env_name, expand, resolve_path, total_trials
from phalanx.validate import field_path, type_problems, wire_form

MAX_PROBLEMS = 20
_NUMBER_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)$")


@dataclass
class Expansion:
    """A checked sweep: its trials when valid, else the problems (nothing is created then)."""

    sweep: TrainingSweep | None
    trials: list[Trial] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.sweep is not None and not self.problems


def _identity(obj: dict[str, Any]) -> list[Problem]:
    problems = type_problems(obj, constants.SWEEP_KIND)
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        problems.append(Problem("metadata.name", "is required (trials are named after the sweep; generateName is not supported)"))
    elif len(name) > MAX_SWEEP_NAME:
        problems.append(Problem("metadata.name", f"{len(name)} characters; at most {MAX_SWEEP_NAME} (trials are named '<sweep>-<index>')"))
    elif not re.fullmatch(patterns.JOB_NAME, name):
        problems.append(Problem("metadata.name", f"must be {patterns.DESCRIPTIONS[patterns.JOB_NAME]}"))
    if not isinstance(obj.get("spec"), dict):
        problems.append(Problem("spec", "is required (a mapping)"))
    return problems


def parse_sweep(obj: Any) -> tuple[TrainingSweep | None, list[Problem]]:
    if not isinstance(obj, dict):
        return None, [Problem("<root>", f"a TrainingSweep must be a mapping, got {type(obj).__name__}")]
    problems: list[Problem] = []
    wire = wire_form(obj, "", problems)
    problems += _identity(wire)
    if problems:
        return None, problems
    doc = {"apiVersion": wire["apiVersion"], "kind": wire["kind"], "metadata": wire["metadata"], "spec": wire["spec"]}
    try:
        return TrainingSweep.model_validate_json(json.dumps(doc), strict=True, by_alias=True, by_name=False), []
    except ValidationError as exc:
        out = []
        for err in exc.errors():
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown field (names are camelCase)"
            out.append(Problem(field_path(err["loc"]) or "spec", msg))
        return None, out


def _value_hint(value: Any, leaf: Leaf) -> str:
    if isinstance(value, str) and leaf.kind in ("int", "float") and _NUMBER_TEXT.match(value):
        return f" ({value!r} is text: YAML 1.1 reads an exponent without a '.' as a string; write e.g. {float(value)!r})"
    if leaf.choices:
        return f" (one of: {', '.join(leaf.choices)})"
    return ""


def check_sweep(obj: Any, config: OperatorConfig | None = None,
                namespace_labels: dict[str, str] | None = None) -> Expansion:
    config = config or OperatorConfig()
    too_big = spec_size_problems(obj, config.limits)  # before any parsing: bounded work per object
    if too_big:
        return Expansion(None, problems=too_big)
    sweep, problems = parse_sweep(obj)
    if sweep is None:
        return Expansion(None, problems=problems)
    spec = sweep.spec
    problems = [Problem(f, m, "api" if enforced else "operator") for f, m, enforced in broken_rules(spec, "spec")]
    problems += [Problem("spec" + (r.field or ""), r.message, "operator") for r in OPERATOR_RULES if not r.holds(spec)]
    # Every parameter names a scalar field of the TrainingJob spec.
    leaves: dict[str, Leaf] = {}
    for i, p in enumerate(spec.parameters):
        leaf = resolve_path(p.path)
        if isinstance(leaf, str):
            problems.append(Problem(f"spec.parameters[{i}].path", f"{p.path}: {leaf}", "operator"))
            continue
        leaves[p.path] = leaf
        if p.range is not None and leaf.kind not in ("int", "float", ENV):
            problems.append(Problem(f"spec.parameters[{i}].range", f"{p.path} is a {leaf.kind} field: a range needs a number field; list its values instead", "operator"))
    for i, trial in enumerate(spec.trials or []):
        for path in trial:
            leaf = resolve_path(path) if re.fullmatch(PARAMETER_PATH, path) else "not a field path like training.lr or env.LR"
            if isinstance(leaf, str):
                problems.append(Problem(f"spec.trials[{i}]", f"{path}: {leaf}", "operator"))
            else:
                leaves[path] = leaf
    if spec.ensemble is not None:
        seed = resolve_path("training.seed")
        assert not isinstance(seed, str)
        leaves["training.seed"] = seed
    total = total_trials(spec)
    if total is None or total > MAX_TRIALS:
        what = "random sampling without maxTrials" if total is None else f"{total} trials"
        problems.append(Problem("spec.maxTrials", f"{what}; a sweep runs at most {MAX_TRIALS} (set maxTrials to run the first ones)", "operator"))
    if not problems:
        problems = sweep_check_problems(total, spec.template.model_dump(by_alias=True, mode="json", exclude_none=True), config.limits)
    if problems:
        return Expansion(sweep, problems=problems)
    # The cluster policy on the template and every value, as the admission policy checks them.
    problems = sweep_policy_problems(spec, config.policy.for_namespace(namespace_labels), sweep.metadata.namespace or "")
    if problems:
        return Expansion(sweep, problems=problems)
    try:
        trials = expand(sweep.metadata.name, spec, {k: v.kind for k, v in leaves.items()})
    except (ValueError, OverflowError) as exc:
        return Expansion(sweep, problems=[Problem("spec.parameters", f"cannot sample: {exc}", "operator")])
    problems = _trial_problems(sweep, trials, leaves, config, namespace_labels)
    return Expansion(sweep, trials if not problems else [], problems)


def trial_object(sweep: TrainingSweep, trial: Trial) -> dict[str, Any]:
    """The trial's TrainingJob (without the owner reference; see decide.trial_manifest)."""
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND,
        "metadata": {"name": trial.name, "namespace": sweep.metadata.namespace,
                     "labels": {constants.LABEL_SWEEP: sweep.metadata.name, constants.LABEL_TRIAL: str(trial.index)}},
        "spec": trial.spec,
    }


def _field(trial: Trial, path: str) -> str:
    """Where a parameter lands in the trial's TrainingJob: spec.<path>, or spec.env[i] for env.NAME."""
    name = env_name(path)
    if name is None:
        return f"spec.{path}"
    index = next((i for i, e in enumerate(trial.spec.get("env") or []) if e.get("name") == name), None)
    return f"spec.env[{index}]"


def _attribute(trial: Trial, problem: Problem, sweep: TrainingSweep) -> tuple[str, str]:
    """(field, message) naming the parameter and value the problem comes from, or the trial."""
    # The problem's field is the parameter's, under it, or above only it (spec.parallelism for
    # parallelism.tensor when no other parameter is under spec.parallelism).
    fields = {path: _field(trial, path) for path in trial.parameters}
    above = [p for p, f in fields.items() if f.startswith(problem.field + ".")]
    for path, value in trial.parameters.items():
        if problem.field == fields[path] or problem.field.startswith(f"{fields[path]}.") or above == [path]:
            where = trial.source
            if where == "spec.parameters":
                index = next((i for i, p in enumerate(sweep.spec.parameters) if p.path == path), None)
                if index is None:  # the ensemble's seed
                    return "spec.ensemble", f"{path}={_fmt(value)}: {problem.message}"
                p = sweep.spec.parameters[index]
                if p.values is not None and value in p.values:
                    return f"spec.parameters[{index}].values[{p.values.index(value)}]", f"{path}={_fmt(value)}: {problem.message}"
                where = f"spec.parameters[{index}].range"
            return where, f"{path}={_fmt(value)}: {problem.message}"
    return "spec", f"{trial.label()} would be an invalid TrainingJob: {problem}"


def _fmt(value: Any) -> str:
    return json.dumps(value)


def _trial_problems(sweep: TrainingSweep, trials: list[Trial], leaves: dict[str, Leaf], config: OperatorConfig,
                    namespace_labels: dict[str, str] | None) -> list[Problem]:
    from phalanx.validate import validate_job

    seen: dict[tuple[str, str], Problem] = {}
    for trial in trials:
        _, problems = validate_job(trial_object(sweep, trial), config, namespace_labels)
        for problem in problems:
            where, message = _attribute(trial, problem, sweep)
            path = next((p for p in trial.parameters if where != "spec" and message.startswith(f"{p}=")), None)
            if path is not None:
                message += _value_hint(trial.parameters[path], leaves[path])
            seen.setdefault((where, message), Problem(where, message, problem.source))
    out = list(seen.values())
    if len(out) > MAX_PROBLEMS:
        out = out[:MAX_PROBLEMS] + [Problem("spec", f"… and {len(out) - MAX_PROBLEMS} more problems", "operator")]
    return out
