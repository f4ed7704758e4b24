"""One verdict on a TrainingJob, the same in `phalanx validate|render|local` and the operator:
the API server's (schema types and bounds, the CRD's CEL rules — shared definitions in
phalanx.api.rules) plus the operator's semantic rules (the built-in runtime's layout, the
cluster's network profiles and topology, what the rendered children need). Pure (but for
:func:`check_document`, the commands' verdict, which also reads a pretrained model's config.json
where this machine has it); every problem names the field and the rule; no input raises.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from phalanx import constants, safejson
from phalanx.api import patterns
from phalanx.api.config import NetworkProfile, OperatorConfig
from phalanx.api.manifests import document_name
from phalanx.api.rules import broken_rules
from phalanx.api.topology_levels import known_level_names
from phalanx.api.types import MAX_JOB_NAME, TrainingJob, TrainingJobSpec
from phalanx.backends import backend_for
from phalanx.gang.topology import current_levels
from phalanx.policy import pod_security_problems, policy_problems
from phalanx.policy.limits import spec_size_problems
from phalanx.problems import Problem
from phalanx.render.configmap import runtime_config
from phalanx_common.hf_config import CONFIG_FILE, check_pretrained
from phalanx_common.layout import check_layout

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
GENERATED_SUFFIX = 5  # the API server appends 5 characters to metadata.generateName
MAX_CONFIG_MAP_BYTES = 1 << 20  # the API server refuses larger ConfigMaps
# Deeper than any field of a TrainingJob or TrainingSweep (under 25 levels); the API server's
# schema refuses or prunes whatever is nested below a field it does not know. The same bound as
# the operator's decoder cuts at (phalanx.safejson).
MAX_DEPTH = safejson.MAX_DEPTH
TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep (no field of a TrainingJob is)"


class InvalidJob(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error's location as a field path: ``("spec", "parameters", 0)`` → ``spec.parameters[0]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# --- What reaches the API server ----------------------------------------------------------------


def wire_form(value: Any, path: str = "", problems: list[Problem] | None = None, depth: int = 0) -> Any:
    """``value`` as the API server receives it from kubectl: nulls pruned (the server drops null
    fields before defaulting), YAML dates as strings. Values JSON cannot carry (NaN, infinities, non-string keys) become problems,
    and so does a value nested deeper than :data:`MAX_DEPTH`: it becomes :data:`TOO_DEEP`, so the
    schema still names the first field where the nesting went wrong, and nothing recurses on it."""
    problems = problems if problems is not None else []
    if isinstance(value, dict | list) and depth >= MAX_DEPTH:
        problems.append(Problem(path, TOO_DEEP))
        return TOO_DEEP
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if not isinstance(key, str):
                problems.append(Problem(where, f"key {key!r} is not a string (JSON object keys are strings)"))
            elif item is not None:
                out[key] = wire_form(item, where, problems, depth + 1)
        return out
    if isinstance(value, list):
        return [wire_form(item, f"{path}[{i}]", problems, depth + 1) for i, item in enumerate(value)]
    if isinstance(value, float):
        if not math.isfinite(value):
            problems.append(Problem(path, f"{value} is not a number JSON can carry (NaN and infinities are refused)"))
            return None
        return value  # 2.0 stays a float: the API server's CEL refuses it where an integer is due
    if isinstance(value, bool | int | str) or value is None:
        return value
    return str(value)  # YAML timestamps: kubectl sends them as strings


def type_problems(obj: dict[str, Any], kind: str) -> list[Problem]:
    """apiVersion and kind: ours, and ``kind``."""
    problems = []
    if obj.get("apiVersion") != constants.API_VERSION:
        problems.append(Problem("apiVersion", f"expected {constants.API_VERSION}, got {obj.get('apiVersion')!r}"))
    if obj.get("kind") != kind:
        problems.append(Problem("kind", f"expected {kind}, got {obj.get('kind')!r}"))
    return problems


def _identity_problems(obj: dict[str, Any]) -> list[Problem]:
    problems = type_problems(obj, constants.KIND)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return problems + [Problem("metadata", "is required (a mapping with name)")]
    name = _effective_name(meta)
    if meta.get("name") is None and isinstance(meta.get("generateName"), str):
        problems += _name_problems(name, "metadata.generateName")
    elif not isinstance(name, str) or not name:
        problems.append(Problem("metadata.name", "is required"))
    else:
        problems += _name_problems(name, "metadata.name")
    if not isinstance(obj.get("spec"), dict):
        problems.append(Problem("spec", "is required (a mapping)"))
    return problems


def _effective_name(meta: dict[str, Any]) -> Any:
    """metadata.name, or what the API server makes of generateName (5 more characters)."""
    generate = meta.get("generateName")
    if meta.get("name") is None and isinstance(generate, str):
        return generate + "x" * GENERATED_SUFFIX
    return meta.get("name")


def _name_problems(name: str, field: str = "metadata.name") -> list[Problem]:
    if len(name) > MAX_JOB_NAME:
        return [Problem(field, f"{len(name)} characters; at most {MAX_JOB_NAME} (pod hostnames '<name>-node-<rank>' must fit a DNS label)")]
    if not re.fullmatch(patterns.JOB_NAME, name):
        return [Problem(field, "must be a DNS-1035 label (lower-case letters, digits, '-', starting with a letter)")]
    return []


def parse_job(obj: Any) -> TrainingJob:
    """Parse a TrainingJob exactly as the API server would take it; raises InvalidJob naming
    every field that is wrong (types are strict: "4" is not a number, snake_case is unknown)."""
    if not isinstance(obj, dict):
        raise InvalidJob([Problem("<root>", f"a TrainingJob must be a mapping, got {type(obj).__name__}")])
    problems: list[Problem] = []
    wire = wire_form(obj, "", problems)
    too_deep = [p for p in problems if p.message == TOO_DEEP]
    problems = [p for p in problems if p.message != TOO_DEEP] + _identity_problems(wire)
    if problems:
        raise InvalidJob(problems + too_deep)
    meta = {**wire["metadata"], "name": _effective_name(wire["metadata"])}
    doc = {"apiVersion": wire["apiVersion"], "kind": wire["kind"], "metadata": meta,
           "spec": wire["spec"]}  # status is the operator's own, read leniently by lifecycle
    try:
        job = TrainingJob.model_validate_json(json.dumps(doc), strict=True, by_alias=True, by_name=False)
    except ValidationError as exc:  # the schema names where a too deep value went wrong
        raise InvalidJob([_problem(err) for err in exc.errors()]) from None
    if too_deep:
        raise InvalidJob(too_deep)
    return job


def _problem(err: Any) -> Problem:
    value = err.get("input")
    if err["type"] in ("kube_schema", "kube_schema_operator"):  # inside a core/v1 type: its own path
        ctx = err["ctx"]
        source = "api" if err["type"] == "kube_schema" else "operator"
        return Problem(field_path(err["loc"]) + ctx["path"], ctx["message"], source)
    if err["type"] == "int_type" and isinstance(value, float) and value.is_integer():
        # The API server stores 2.0 for an integer field; its CEL rules then refuse it where
        # they read it, the runtime never should see it: refused here, whatever the field.
        return Problem(field_path(err["loc"]), f"must be an integer, not {value} (write {int(value)})", "operator")
    return Problem(field_path(err["loc"]), _message(err))


def _message(err: Any) -> str:
    """pydantic's words, made specific where they would show a regex or say 'extra inputs'."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        what = patterns.DESCRIPTIONS.get(ctx.get("pattern"), f"matching {ctx.get('pattern')}")
        return f"{err['input']!r} must be {what}"
    if kind == "extra_forbidden":
        known = _known_fields(err["loc"][:-1])
        camel = to_camel(str(err["loc"][-1]))
        hint = (f"; did you mean {camel}?" if camel in known and camel != err["loc"][-1]
                else f"; known fields here: {', '.join(known)}" if known else "")
        return f"unknown field (the API server would refuse or drop it; names are camelCase){hint}"
    return err["msg"]


def _known_fields(loc: tuple[Any, ...]) -> list[str]:
    """The wire names of the model at ``loc`` (a pydantic error location from the root)."""
    model: Any = TrainingJob
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if fields is None or isinstance(part, int):
            continue
        info = next((f for n, f in fields.items() if (f.alias or n) == part), None)
        if info is None:
            return []
        model = _model_of(info.annotation)
    fields = getattr(model, "model_fields", {})
    return [f.alias or n for n, f in fields.items()]


def _model_of(annotation: Any) -> Any:
    """The pydantic model inside ``X | None`` or ``list[X]`` (or None)."""
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


# --- Semantic rules -----------------------------------------------------------------------------


def _spec_problems(errors: list[str]) -> list[Problem]:
    """phalanx_common's ``"<field>: <rule>"`` messages as the operator's problems on ``spec.<field>``."""
    return [Problem(f"spec.{field}", message, "operator")
            for field, _, message in (error.partition(": ") for error in errors)]


def _layout_problems(spec: TrainingJobSpec) -> list[Problem]:
    """The built-in runtime's layout rules (phalanx_common.layout), for jobs it trains."""
    return _spec_problems(check_layout(spec)) if spec.uses_runtime else []


def validate_network(spec: Any, profile: NetworkProfile | None, profile_name: str | None = None) -> list[str]:
    """Semantic errors of spec.network against the cluster's network profile (empty when fine)."""
    name = profile_name or spec.network.profile
    if profile is None:
        return [f"network.profile: unknown network profile {name!r}"]
    errors = []
    if spec.network.host_network and not profile.allow_host_network:
        errors.append(
            f"network.hostNetwork: network profile {name!r} does not allow hostNetwork "
            "(set allowHostNetwork in the operator's network profile)"
        )
    for k in spec.network.nccl_env:
        if not _ENV_NAME.match(k):
            errors.append(f"network.ncclEnv: {k!r} is not a valid environment variable name")
    return errors


def _cluster_problems(spec: TrainingJobSpec, config: OperatorConfig) -> list[Problem]:
    out: list[Problem] = []
    if not spec.image and not config.runtime_image and config.installed:
        out.append(Problem("spec.image", "no image: name one, or install the operator with a default "
                           "(chart value runtime.image.repository, operator config runtimeImage)", "operator"))
    profile = config.network_profiles.get(spec.network.profile)
    for error in validate_network(spec, profile):
        field, _, message = error.partition(": ")
        if field == "network.profile":
            message += f"; known: {', '.join(sorted(config.network_profiles))}"
        out.append(Problem(f"spec.{field}", message, "operator"))
    stub = TrainingJob(metadata={"name": "validate"}, spec=spec)
    for error in backend_for(spec).validate(stub, levels=current_levels(config.topology),
                                            workload_api_versions=config.workload_api_versions):
        out.append(Problem("spec.scheduling", error, "operator"))
    known = known_level_names(config.topology)
    for key in ("required", "preferred"):
        level = getattr(spec.scheduling.topology, key)
        if level is not None and level not in known:
            names = sorted({n for n in known if "/" not in n})
            out.append(Problem(f"spec.scheduling.topology.{key}",
                               f"unknown topology level {level!r}; known: {', '.join(names)}", "operator"))
    topo = profile.topo_file if profile else None
    if topo is not None and any(m.mount_path == topo.path for m in spec.volume_mounts):
        out.append(Problem("spec.volumeMounts", f"{topo.path} is where network profile {spec.network.profile!r} mounts NCCL_TOPO_FILE", "operator"))
    return out


def _resource_problems(spec: TrainingJobSpec) -> list[Problem]:
    """Extended resources (domain/name) are counted in whole units; hugepages need cpu or memory."""
    out = []
    res = spec.resources
    if any(k.startswith("hugepages-") for k in res.extra) and res.cpu is None and res.memory is None:
        out.append(Problem("spec.resources.extra", "hugepages need resources.cpu or resources.memory as well", "operator"))
    for name, amount in spec.resources.extra.items():
        if "/" in name and not (isinstance(amount, int) or str(amount).lstrip("+").isdigit()):
            out.append(Problem(f"spec.resources.extra[{name}]", f"{amount!r}: extended resources are whole numbers", "operator"))
    return out


def _size_problems(job: TrainingJob) -> list[Problem]:
    size = len(json.dumps(runtime_config(job), indent=2, sort_keys=True).encode())
    if size > MAX_CONFIG_MAP_BYTES - 4096:
        return [Problem("spec", f"the job's runtime config is {size} bytes; a ConfigMap holds at most "
                                f"{MAX_CONFIG_MAP_BYTES} (shorten args, env or volumes)", "operator")]
    return []


def _policy_problems(job: TrainingJob, config: OperatorConfig, namespace_labels: dict[str, str] | None) -> list[Problem]:
    spec = job.spec
    rules = config.policy.for_namespace(namespace_labels)
    profile = config.network_profiles.get(spec.network.profile)
    return policy_problems(spec, rules, job.metadata.namespace or "") + pod_security_problems(spec, profile, job.metadata.namespace, namespace_labels)


def validate_spec(spec: TrainingJobSpec, config: OperatorConfig | None = None) -> list[Problem]:
    config = config or OperatorConfig()
    rules = [Problem(f, m, "api" if enforced else "operator") for f, m, enforced in broken_rules(spec, "spec")]
    # A CEL rule's message gives way to the layout check's on the same field (it has the numbers);
    # the verdict stays the API server's.
    by_field = {p.field: p for p in rules}
    layout = [replace(p, source=by_field[p.field].source) if p.field in by_field else p for p in _layout_problems(spec)]
    shown = {p.field for p in layout}
    return [p for p in rules if p.field not in shown] + layout + _cluster_problems(spec, config) + _resource_problems(spec)


def validate_job(obj: Any, config: OperatorConfig | None = None,
                 namespace_labels: dict[str, str] | None = None) -> tuple[TrainingJob | None, list[Problem]]:
    """Parse and check a whole object, under the policy for a namespace with ``namespace_labels``
    (None: the default policy, no Pod Security label). Returns (job or None, problems); never raises."""
    config = config or OperatorConfig()
    too_big = spec_size_problems(obj, config.limits)  # before any parsing: bounded work per object
    if too_big:
        return None, too_big
    try:
        job = parse_job(obj)
    except InvalidJob as exc:
        return None, exc.problems
    try:
        problems = validate_spec(job.spec, config) + _policy_problems(job, config, namespace_labels)
        if not problems:
            problems = _size_problems(job)
    except Exception as exc:  # noqa: BLE001 - a checker bug must still give a verdict, not a crash
        problems = [Problem("spec", f"could not be checked ({type(exc).__name__}: {exc}); please report this", "operator")]
    return job, problems


def pretrained_problems(spec: TrainingJobSpec) -> list[Problem]:
    """model.pretrained's config.json against the spec, where the directory is readable on this
    machine (`phalanx validate|render|local` on a copy of the model, or `phalanx local`, whose
    processes read that very path). None otherwise: the in-cluster operator cannot see a pod's
    volume; the runtime checks the same in the pods before training starts."""
    if spec.model is None or spec.model.pretrained is None:
        return []
    if not (Path(spec.model.pretrained.path) / CONFIG_FILE).is_file():
        return []
    return _spec_problems(check_pretrained(spec))


def check_document(obj: dict[str, Any], config: OperatorConfig, path: str) -> tuple[TrainingJob | None, list[str]]:
    """The verdict on a TrainingJob read from the file ``path`` (`phalanx validate|render|local`,
    alone or next to TrainingSweeps): the job (None when it has problems) and one error line a
    problem; a pretrained model's config.json is checked too where this machine can read it
    (:func:`pretrained_problems`). Its namespace defaults to ``default``, as kubectl's does."""
    if isinstance(obj.get("metadata"), dict):
        obj["metadata"].setdefault("namespace", "default")
    job, problems = validate_job(obj, config)
    if job is not None and not problems:
        problems = pretrained_problems(job.spec)
    return (None if problems else job), [f"error: {path}: TrainingJob {document_name(obj)}: {p}" for p in problems]
