"""The admin's ClusterPolicy against one job, or a sweep's template and values (pure). One
function per rule family; policy/admission.py is the same rules in CEL."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from pydantic import ValidationError

from phalanx.api.policy import (
    SYSTEM_PRIORITY_PREFIX,
    VOLUME_SECRET_REFS,
    PolicyRules,
    effective_scheduler_name,
)
from phalanx.api.sweep import TrainingSweepSpec
from phalanx.api.types import TrainingJobSpec
from phalanx.policy.storage import storage_problems
from phalanx.problems import Problem

# The scalar spec fields a sweep parameter or a list trial can set that the policy looks at: each
# value is checked as if the template had it (the admission policy does the same in CEL).
SWEEP_POLICY_PATHS = (
    "nodes", "elastic.maxNodes", "serviceAccountName", "scheduling.backend", "scheduling.schedulerName",
    "scheduling.queue", "scheduling.priorityClassName", "network.profile", "failurePolicy.maxRestarts",
    "failurePolicy.backoffSeconds",
)
# What a sweep may not vary (checked in the template only): its volumes and its object storage.
SWEEP_FIXED_PREFIXES = ("checkpoint.volume.", "checkpoint.storage.")


def _p(field: str, message: str) -> Problem:
    return Problem(field, f"{message} (cluster policy)", "operator")


def _allowed(items: list[str], secret: str, rules: PolicyRules) -> list[str]:
    """``items`` with ``secret`` only where the policy allows Secrets."""
    return [i for i in items if i != secret] + ([secret] if rules.allow_secrets else [])


def allowed_volume_types(rules: PolicyRules) -> list[str]:
    return _allowed(rules.allowed_volume_types, "secret", rules)


def allowed_projected_sources(rules: PolicyRules) -> list[str]:
    return _allowed(rules.allowed_projected_sources, "secret", rules)


def _volumes(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    allowed = allowed_volume_types(rules)
    named = [(f"spec.volumes[{i}]", v) for i, v in enumerate(spec.volumes)]
    if spec.checkpoint.volume is not None:
        named.append(("spec.checkpoint.volume", spec.checkpoint.volume))
    out = []
    for field, volume in named:
        source = volume.source()
        content = volume.to_kube().get(source) if source else None
        if source not in allowed:
            out.append(_p(field, f"{source} volumes are not allowed here; allowed: {', '.join(allowed)}"))
            continue
        ref = VOLUME_SECRET_REFS.get(source)
        if ref and not rules.allow_secrets and isinstance(content, dict) and content.get(ref) is not None:
            out.append(_p(f"{field}.{source}.{ref}", "names a Secret; Secrets are not allowed here"))
        if source == "projected":
            out += _projected(field, content, rules)
    return out


def _projected(field: str, projected: Any, rules: PolicyRules) -> list[Problem]:
    """Source by source: every member of every source must be allowed (unknown ones are not)."""
    allowed = allowed_projected_sources(rules)
    sources = projected.get("sources") if isinstance(projected, dict) else None
    out = []
    for j, source in enumerate(sources if isinstance(sources, list) else []):
        for kind in source if isinstance(source, dict) else ["?"]:
            if kind not in allowed:
                why = "Secrets are not allowed here" if kind == "secret" else f"not allowed here; allowed: {', '.join(allowed)}"
                out.append(_p(f"{field}.projected.sources[{j}].{kind}", f"projected {kind}: {why}"))
    return out


def _env(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    if rules.allow_secrets:
        return []
    lists = [("spec.env", spec.env)] + [(f"spec.roles[{j}].env", r.env) for j, r in enumerate(spec.roles)]
    return [_p(f"{where}[{i}].valueFrom.secretKeyRef", "Secret references are not allowed here")
            for where, env in lists for i, e in enumerate(env)
            if e.value_from is not None and e.value_from.secret_key_ref is not None]


def _identity(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    sa = spec.service_account_name
    if sa is not None and sa not in rules.allowed_service_accounts:
        return [_p("spec.serviceAccountName", f"service account {sa!r} is not allowed here; allowed: {', '.join(rules.allowed_service_accounts) or 'none'}")]
    return []


def _scheduling(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    out = []
    sched = spec.scheduling
    backend = str(sched.backend)
    if backend not in rules.allowed_backends:
        out.append(_p("spec.scheduling.backend", f"backend {backend} is not allowed here; allowed: {', '.join(rules.allowed_backends) or 'none'}"))
    name = effective_scheduler_name(sched.scheduler_name, backend)
    if name is not None and name not in rules.allowed_scheduler_names:
        field, whose = ("spec.scheduling.schedulerName", "") if sched.scheduler_name else ("spec.scheduling.backend", f" (backend {backend} sets it)")
        out.append(_p(field, f"scheduler {name!r}{whose} is not allowed here; allowed: {', '.join(rules.allowed_scheduler_names) or 'kube-scheduler only'}"))
    if sched.queue is not None and rules.allowed_queues is not None and sched.queue not in rules.allowed_queues:
        out.append(_p("spec.scheduling.queue", f"queue {sched.queue!r} is not allowed here; allowed: {', '.join(rules.allowed_queues) or 'none'}"))
    pc = sched.priority_class_name
    if pc is not None and rules.allowed_priority_classes is None and pc.startswith(SYSTEM_PRIORITY_PREFIX):
        out.append(_p("spec.scheduling.priorityClassName", f"priority class {pc!r} is not allowed here: {SYSTEM_PRIORITY_PREFIX}* classes only where the policy lists them"))
    elif pc is not None and rules.allowed_priority_classes is not None and pc not in rules.allowed_priority_classes:
        out.append(_p("spec.scheduling.priorityClassName", f"priority class {pc!r} is not allowed here; allowed: {', '.join(rules.allowed_priority_classes) or 'none'}"))
    return out


def _network(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    profile = spec.network.profile
    if rules.allowed_network_profiles is not None and profile not in rules.allowed_network_profiles:
        return [_p("spec.network.profile", f"network profile {profile!r} is not allowed here; allowed: {', '.join(rules.allowed_network_profiles) or 'none'}")]
    return []


def _placement(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    out = [_p(f"spec.nodeSelector[{key}]", "selecting on this node label is not allowed")
           for key in spec.node_selector if key in rules.forbidden_node_selector_keys]
    for i, t in enumerate(spec.tolerations):
        if not t.key and not rules.allow_keyless_tolerations:
            out.append(_p(f"spec.tolerations[{i}]", "a toleration without a key tolerates every taint; name the taint key"))
        elif t.key in rules.forbidden_toleration_keys:
            out.append(_p(f"spec.tolerations[{i}].key", f"tolerating {t.key} is not allowed"))
    return out


def _limits(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    out = []
    role_pods = spec.gang_size - spec.nodes
    most = max(spec.nodes, spec.elastic.max_nodes if spec.elastic else 0)
    if rules.max_nodes is not None and most + role_pods > rules.max_nodes:
        field = ("spec.roles" if spec.nodes <= rules.max_nodes and most <= rules.max_nodes
                 else "spec.nodes" if spec.nodes > rules.max_nodes else "spec.elastic.maxNodes")
        roles = f" and {role_pods} role pods" if role_pods else ""
        out.append(_p(field, f"{most} nodes{roles}; at most {rules.max_nodes} pods per job"))
    fp = spec.failure_policy
    if rules.max_restarts is not None and fp.max_restarts > rules.max_restarts:
        out.append(_p("spec.failurePolicy.maxRestarts", f"{fp.max_restarts}; at most {rules.max_restarts}"))
    if fp.backoff_seconds < rules.min_restart_backoff_seconds:
        out.append(_p("spec.failurePolicy.backoffSeconds", f"{fp.backoff_seconds}; at least {rules.min_restart_backoff_seconds}"))
    return out


def policy_problems(spec: TrainingJobSpec, rules: PolicyRules, namespace: str = "") -> list[Problem]:
    return (_volumes(spec, rules) + _env(spec, rules) + _identity(spec, rules) + _scheduling(spec, rules)
            + _network(spec, rules) + _placement(spec, rules) + _limits(spec, rules) + storage_problems(spec, rules, namespace))


# --- TrainingSweeps ----------------------------------------------------------------------------


def sweep_policy_problems(spec: TrainingSweepSpec, rules: PolicyRules, namespace: str = "") -> list[Problem]:
    """The template as a job, then every parameter value (a range by its ends) as the template with
    that value: whatever trials the sampler picks, none can break the policy. List trials are
    whole specs, checked as the TrainingJobs they become (sweep/check.py)."""
    template = spec.template.spec
    own = policy_problems(template, rules, namespace)
    out = [Problem("spec.template." + p.field, p.message, p.source) for p in own]
    seen = {(p.field, p.message) for p in own}
    wire = template.model_dump(by_alias=True, mode="json", exclude_none=True)
    # A trial of a backend value gets the schedulerName parameter's value, when there is one.
    named = next((p.values[0] for p in spec.parameters if p.path == "scheduling.schedulerName" and p.values), None)
    for i, param in enumerate(spec.parameters):
        if param.path.startswith(SWEEP_FIXED_PREFIXES):
            out.append(_p(f"spec.parameters[{i}].path", f"{param.path}: volumes and storage are checked in the template; a parameter may not set them"))
        if param.path not in SWEEP_POLICY_PATHS:
            continue
        values = [(f"spec.parameters[{i}].values[{j}]", v) for j, v in enumerate(param.values or [])]
        if param.range is not None:  # whole numbers: every policy field is an integer
            values += [(f"spec.parameters[{i}].range", v) for v in (math.ceil(param.range.min), math.floor(param.range.max))]
        for field, value in values:
            extra = {"scheduling.schedulerName": named} if param.path == "scheduling.backend" and named else {}
            for problem in _with_values(wire, {param.path: value, **extra}, rules, namespace):
                if (problem.field, problem.message) not in seen:
                    out.append(Problem(field, f"{param.path}={json.dumps(value)}: {problem.message}", problem.source))
    for i, trial in enumerate(spec.trials or []):
        out += [_p(f"spec.trials[{i}]", f"{path}: volumes and storage are checked in the template; a trial may not set them")
                for path in trial if path.startswith(SWEEP_FIXED_PREFIXES)]
    return list({(p.field, p.message): p for p in out}.values())


def _with_values(template: dict[str, Any], values: dict[str, Any], rules: PolicyRules, namespace: str) -> list[Problem]:
    """The policy on ``template`` with ``values`` (path → value) set as a trial sets them."""
    spec = copy.deepcopy(template)
    for path, value in values.items():
        *parents, leaf = path.split(".")
        node = spec
        for part in parents:  # as sweep/params.py set_path builds a trial
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[leaf] = value
    try:
        parsed = TrainingJobSpec.model_validate_json(json.dumps(spec), strict=True, by_alias=True, by_name=False)
    except ValidationError:
        return []  # a value of the wrong type: the trial's own check says so
    return policy_problems(parsed, rules, namespace)
