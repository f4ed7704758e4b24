"""The TrainingSweep API (phalanx.dev/v1alpha1): hyperparameter sweeps and ensembles as one object.

A sweep holds a TrainingJob template, the parameters to vary (any scalar spec field, by its wire
path: ``training.lr``, ``parallelism.zero``, ``model.overrides.dim``; or one environment variable
of the trainer, ``env.LR``, for a command job's script), how to pick them (grid, random with a
seed, an explicit list; ``ensemble`` multiplies each configuration by N seeds), the objective (a
built-in metric or any metric the trial reports, e.g. ``eval_loss``), ``maxParallel``/``maxTrials``
and early stopping. Each
trial is a TrainingJob the sweep owns. The CRD (crds/phalanx.dev_trainingsweeps.yaml) and the
reference section of docs/api.md are generated from these models (``make crds``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from phalanx import constants
from phalanx.api import patterns
from phalanx.api.base import Model, unique_by
from phalanx.api.crd import custom_resource_definition, openapi_schema, unchanged_checks
from phalanx.api.rules import Rule
from phalanx.api.types import MAX_JOB_NAME, Condition, ObjectMeta, TrainingJobSpec

# Trials are named "<sweep>-<index>", index < MAX_TRIALS: the name must leave room for it.
MAX_TRIALS = 256
MAX_SWEEP_NAME = MAX_JOB_NAME - len(f"-{MAX_TRIALS - 1}")
MAX_PARAMETERS = 16
MAX_MILESTONES = 12
# A parameter's path: the wire names (camelCase) of nested spec fields, e.g. training.lr; or
# ENV_PARAMETER_PREFIX and the name of one environment variable of the trainer (spec.env), e.g.
# env.LR. Env names are shell variable names: a script reads them, and `$(LR)` in args expands them.
ENV_PARAMETER_PREFIX = "env."
ENV_PARAMETER_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
PARAMETER_PATH = (r"^([a-zA-Z][a-zA-Z0-9]*(\.[a-zA-Z][a-zA-Z0-9]*){0,7}|"
                  + ENV_PARAMETER_PREFIX.replace(".", r"\.") + ENV_PARAMETER_NAME + ")$")

Scalar = bool | int | float | Annotated[str, Field(max_length=512)]


class Algorithm(StrEnum):
    GRID = "grid"
    RANDOM = "random"
    LIST = "list"


class Scale(StrEnum):
    LINEAR = "linear"
    LOG = "log"


class Metric(StrEnum):
    """The built-in objective metrics; any other objective.metric names a metric the trial reports."""

    FINAL_LOSS = "finalLoss"
    BEST_LOSS = "bestLoss"
    TOKENS_PER_SECOND = "tokensPerSecond"


BUILTIN_METRICS = tuple(m.value for m in Metric)


class Aggregate(StrEnum):
    """How a reported metric's values make the trial's value."""

    LAST = "last"
    BEST = "best"


class Goal(StrEnum):
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class StopRule(StrEnum):
    NONE = "none"
    MEDIAN = "median"
    ASHA = "asha"


class SweepPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ParameterRange(Model):
    """A continuous range for random sampling; integer fields get whole numbers."""

    min: float = Field(..., description="Lowest value (inclusive).")
    max: float = Field(..., description="Highest value (inclusive).")
    scale: Scale = Field(Scale.LINEAR, description="linear: uniform; log: log-uniform (min > 0).")

    checks = (
        Rule("self.min < self.max", "range.min must be less than range.max", lambda r: r.min < r.max, ".min"),
        Rule("self.scale != 'log' || self.min > 0", "a log-scale range needs min > 0",
             lambda r: r.scale != Scale.LOG or r.min > 0, ".min"),
    )


class SweepParameter(Model):
    path: str = Field(..., pattern=PARAMETER_PATH, max_length=256,
                      description="The TrainingJob spec field to vary, by its wire path, e.g. training.lr, parallelism.zero, "
                      "model.overrides.dim; or env.NAME: the trainer's environment variable NAME (spec.env), set to the value as text.")
    values: list[Scalar] | None = Field(None, min_length=1, max_length=MAX_TRIALS,
                                        description="The values to try (grid: every one; random: one of them uniformly).")
    range: ParameterRange | None = Field(None, description="Random only: sample from this range.")



class Objective(Model):
    metric: str = Field(
        Metric.FINAL_LOSS.value, pattern=constants.METRIC_NAME_PATTERN, max_length=64,
        description="Built in: finalLoss (the loss when the trial ends), bestLoss (the lowest loss it reported) or "
        "tokensPerSecond. Any other name is a metric the trial reports (status.metrics of its TrainingJob), "
        "e.g. eval_loss, eval_accuracy; loss is the training loss.")
    aggregate: Aggregate | None = Field(
        None, description="A reported metric only: last (default: its last value) or best (the lowest for "
        "minimize, the highest for maximize, of the values the sweep saw at its samples and at the end).")
    goal: Goal = Field(Goal.MINIMIZE, description="minimize or maximize the metric.")

    checks = (
        Rule("!has(self.aggregate) || !(self.metric in [" + ", ".join(f"'{m}'" for m in BUILTIN_METRICS) + "])",
             "objective.aggregate is for a reported metric; " + ", ".join(BUILTIN_METRICS)
             + " are built in (bestLoss is metric loss with aggregate best)",
             lambda o: o.aggregate is None or o.metric not in BUILTIN_METRICS, ".aggregate"),
    )

    @property
    def reported(self) -> bool:
        """A metric the trial reports (status.metrics), not a built-in one."""
        return self.metric not in BUILTIN_METRICS

    @property
    def keeps_best(self) -> bool:
        return self.aggregate == Aggregate.BEST

    def label(self) -> str:
        """The objective in messages: ``eval_loss``, ``best eval_loss``, ``finalLoss``."""
        return f"best {self.metric}" if self.keeps_best else self.metric


class EarlyStopping(Model):
    """Stop trials that are behind, from the progress each trial reports (its step and the
    objective metric's value, in the trial's status). A stopped trial is suspended as ``spec.suspend: true`` does: its pods get
    SIGTERM, save a checkpoint at the next step boundary, and the checkpoint stays (with the
    template's `checkpoint.volume`; without one nothing is kept)."""

    rule: StopRule = Field(StopRule.NONE, description="none, median (median stopping rule) or asha (asynchronous successive halving).")
    grace_steps: int = Field(10, ge=1, le=1 << 40, description="No trial is stopped before this step (ASHA: the first rung).")
    interval_steps: int | None = Field(None, ge=1, le=1 << 40, description="median: compare every this many steps after graceSteps (default graceSteps).")
    min_trials: int = Field(2, ge=1, le=MAX_TRIALS, description="median: other trials with a value at the same step needed before stopping one.")
    reduction_factor: int = Field(3, ge=2, le=16, description="asha: keep the top 1/reductionFactor at each rung; rungs at graceSteps × reductionFactor^k.")


class Ensemble(Model):
    """N copies of each configuration that differ only in ``training.seed``."""

    size: int = Field(..., ge=1, le=MAX_TRIALS, description="Seeds per configuration.")
    first_seed: int | None = Field(None, ge=0, le=(1 << 53) - 1 - MAX_TRIALS,
                                   description="Seeds firstSeed, firstSeed+1, …; default: the template's training.seed.")


class TrialTemplate(Model):
    spec: TrainingJobSpec = Field(..., description="The TrainingJob spec every trial starts from.")


class TrainingSweepSpec(Model):
    template: TrialTemplate = Field(..., description="The trials' TrainingJob template.")
    algorithm: Algorithm = Field(Algorithm.GRID, description="grid (every combination of values), random (maxTrials samples, seeded) or list (the trials given).")
    parameters: list[SweepParameter] = Field(
        default_factory=list, max_length=MAX_PARAMETERS, description="The spec fields to vary.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["path"]})
    trials: list[Annotated[dict[str, Scalar], Field(min_length=1, max_length=MAX_PARAMETERS)]] | None = Field(
        None, min_length=1, max_length=MAX_TRIALS,
        description="algorithm list: each trial's assignment, path → value, e.g. {training.lr: 0.001}.")
    seed: int = Field(0, ge=0, le=(1 << 53) - 1, description="random: the sampler's seed (same seed, same trials).")
    ensemble: Ensemble | None = Field(None, description="Run each configuration with this many training seeds.")
    objective: Objective = Field(default_factory=Objective, description="What the trials are ranked by: the best trial has the best value.")
    max_parallel: int = Field(1, ge=1, le=MAX_TRIALS, description="Trials that exist unfinished at once (queued ones included). The only field that may change.")
    max_trials: int | None = Field(None, ge=1, le=MAX_TRIALS, description="At most this many trials (random: how many to sample; grid: the first ones).")
    early_stopping: EarlyStopping = Field(default_factory=EarlyStopping)

    checks = (
        Rule("self.algorithm != 'random' || has(self.maxTrials)", "algorithm random needs maxTrials (how many samples)",
             lambda s: s.algorithm != Algorithm.RANDOM or s.max_trials is not None, ".maxTrials"),
        Rule("self.algorithm != 'grid' || !has(self.parameters) || self.parameters.all(p, !has(p.range))",
             "algorithm grid needs values for every parameter (a range is for random)",
             lambda s: s.algorithm != Algorithm.GRID or all(p.range is None for p in s.parameters), ".parameters"),
        Rule("self.algorithm != 'list' || !has(self.parameters) || size(self.parameters) == 0",
             "algorithm list takes its assignments from trials, not parameters",
             lambda s: s.algorithm != Algorithm.LIST or not s.parameters, ".parameters"),
        Rule("self.algorithm == 'list' || has(self.ensemble) || (has(self.parameters) && size(self.parameters) > 0)",
             "set parameters to vary (or ensemble, or algorithm list with trials)",
             lambda s: s.algorithm == Algorithm.LIST or s.ensemble is not None or bool(s.parameters), ".parameters"),
        Rule("!has(self.ensemble) || !has(self.parameters) || !self.parameters.exists(p, p.path == 'training.seed')",
             "ensemble sets training.seed itself; do not also vary it as a parameter",
             lambda s: s.ensemble is None or all(p.path != "training.seed" for p in s.parameters), ".ensemble"),
    )

    @field_validator("parameters")
    @classmethod
    def _unique_paths(cls, v: list[SweepParameter]) -> list[SweepParameter]:
        return unique_by(v, "path", "parameter path")


# Rules on the free-form values (parameter values, list trials): CEL cannot see fields whose
# schema takes any scalar, so the operator (and `phalanx validate`) enforce these; not in
# ``checks`` (phalanx.api.base.all_rules lists the TrainingJob's operator-only rules).
OPERATOR_RULES = (
    Rule(None, "trials is set exactly when algorithm is list",
         lambda s: (s.algorithm == Algorithm.LIST) == (s.trials is not None), ".trials"),
    Rule(None, "set exactly one of values or range in every parameter",
         lambda s: all((p.values is None) != (p.range is None) for p in s.parameters), ".parameters"),
)


# ---------------------------------------------------------------------------------------------
# Status


class Milestone(Model):
    step: int = Field(..., description="The milestone (early-stopping rung).")
    value: float = Field(..., description="The objective metric when the trial was first seen at or past it (a reported "
                         "metric: its latest value then, or at the first sample after that has one).")
    at: int | None = Field(None, description="The step the trial had then.")


class TrialStatus(Model):
    name: str
    index: int
    parameters: dict[str, Scalar] = Field(default_factory=dict)
    phase: str = Field("Waiting", description="Waiting (not created), the TrainingJob's phase, Stopping or Stopped (early-stopped).")
    step: int | None = None
    value: float | None = Field(None, description="The objective value (final once the trial ended); none while the trial "
                                "has not reported the metric.")
    best_loss: float | None = None
    milestones: list[Milestone] = Field(default_factory=list)
    reason: str | None = None
    message: str | None = None


class BestTrial(Model):
    name: str
    index: int
    value: float
    parameters: dict[str, Scalar] = Field(default_factory=dict)


class TrainingSweepStatus(Model):
    phase: SweepPhase = SweepPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    total_trials: int = 0
    finished_trials: int = 0
    running_trials: int = 0
    succeeded_trials: int = 0
    failed_trials: int = 0
    stopped_trials: int = 0
    progress: str = Field("0/0", description="finished/total trials, for the printer column.")
    best_trial: BestTrial | None = None
    trials: list[TrialStatus] = Field(default_factory=list)
    start_time: str | None = None
    completion_time: str | None = None
    message: str | None = None
    spec_hash: str | None = Field(None, description="The spec the trials come from (all but maxParallel); a changed one is refused.")


class TrainingSweep(BaseModel):
    """The whole object, as read from YAML or the API server."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    api_version: str = Field(constants.API_VERSION, alias="apiVersion")
    kind: str = constants.SWEEP_KIND
    metadata: ObjectMeta
    spec: TrainingSweepSpec
    status: TrainingSweepStatus | None = None


# ---------------------------------------------------------------------------------------------
# CRD


PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Done", "type": "string", "jsonPath": ".status.progress", "description": "finished/total trials"},
    {"name": "Running", "type": "integer", "jsonPath": ".status.runningTrials"},
    {"name": "Stopped", "type": "integer", "jsonPath": ".status.stoppedTrials", "priority": 1},
    {"name": "Best", "type": "string", "jsonPath": ".status.bestTrial.name"},
    {"name": "Value", "type": "number", "jsonPath": ".status.bestTrial.value"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
MUTABLE_FIELDS = ("maxParallel",)
# Free-form values CEL cannot compare: the operator keeps the sweep to the spec it started with
# (status.specHash) and refuses a changed one (sweep/decide.py).
UNCOMPARABLE_FIELDS = ("trials",)

NAME_RULES = [
    {"rule": f"self.metadata.name.matches(r'{patterns.JOB_NAME}')",
     "message": f"metadata.name must be {patterns.DESCRIPTIONS[patterns.JOB_NAME]}"},
    {"rule": f"size(self.metadata.name) <= {MAX_SWEEP_NAME}",
     "message": f"metadata.name: at most {MAX_SWEEP_NAME} characters (trials are named '<sweep>-<index>' and must fit a TrainingJob name)"},
]


def immutability_rule(spec_schema: dict[str, Any]) -> dict[str, str]:
    checks = unchanged_checks(spec_schema, MUTABLE_FIELDS + UNCOMPARABLE_FIELDS)
    return {"rule": " && ".join(checks),
            "message": "only " + ", ".join(MUTABLE_FIELDS) + " may change; create a new sweep to change anything else",
            "reason": "FieldValueForbidden"}


def build_sweep_crd() -> dict[str, Any]:
    spec_schema = openapi_schema(TrainingSweepSpec)
    spec_schema.setdefault("x-kubernetes-validations", []).append(immutability_rule(spec_schema))
    names = {"kind": constants.SWEEP_KIND, "plural": constants.SWEEP_PLURAL, "singular": constants.SWEEP_SINGULAR, "shortNames": constants.SWEEP_SHORT_NAMES}
    return custom_resource_definition(constants.SWEEP_CRD_NAME, names, spec_schema, TrainingSweepStatus, NAME_RULES, PRINTER_COLUMNS)


def sweep_crd_yaml() -> str:
    header = "# Generated from operator/phalanx/api by `make crds` (phalanx crd --sweep). Do not edit.\n"
    return header + yaml.safe_dump(build_sweep_crd(), sort_keys=False, width=100)


def sweep_reference() -> str:
    """The TrainingSweep section of docs/api.md (appended to the TrainingJob reference)."""
    from phalanx.api.reference import _rows

    root = build_sweep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    lines = [
        "# TrainingSweep API reference (phalanx.dev/v1alpha1)",
        "",
        f"Short name `{constants.SWEEP_SHORT_NAMES[0]}`. A sweep's trials are TrainingJobs named `<sweep>-<index>`, "
        f"owned by the sweep (labels `{constants.LABEL_SWEEP}`, `{constants.LABEL_TRIAL}`). Guide: [sweep.md](sweep.md).",
        "",
        "Rules (API server CEL and operator alike; the template is held to every TrainingJob rule, and "
        "every generated trial is checked as a TrainingJob before anything is created):",
        "",
    ]
    lines += [f"- {r['message']}" for r in _cel_messages(root["spec"])]
    lines += [f"- {r.message} (operator)" for r in OPERATOR_RULES]
    for title in ("spec", "status"):
        lines += ["", f"## TrainingSweep {title}", "", "| field | type | default | description |", "|---|---|---|---|"]
        node = root[title]
        if title == "spec":  # the template's fields are the TrainingJob spec's (above)
            node = {**node, "properties": {k: v for k, v in node["properties"].items()}}
            node["properties"]["template"] = {"type": "object", "description": "{spec: <TrainingJob spec>}: the trials' template (see the TrainingJob spec above)."}
        _rows(node, "", node.get("required", []), lines)
    return "\n".join(lines) + "\n"


def _cel_messages(spec_schema: dict[str, Any]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []

    def walk(node: Any, in_template: bool) -> None:
        if isinstance(node, dict):
            if not in_template:
                out.extend(r for r in node.get("x-kubernetes-validations", []) if not r["message"].startswith("must be "))
            for key, value in node.items():
                walk(value, in_template or key == "template")
        elif isinstance(node, list):
            for value in node:
                walk(value, in_template)

    walk(spec_schema, False)
    return out
