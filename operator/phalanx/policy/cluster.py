"""The admin's ClusterPolicy against one job (pure). One function per rule family."""

from __future__ import annotations

from phalanx.api.policy import PolicyRules
from phalanx.api.types import TrainingJobSpec
from phalanx.problems import Problem


def _p(field: str, message: str) -> Problem:
    return Problem(field, f"{message} (cluster policy)", "operator")


def _volumes(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    allowed = set(rules.allowed_volume_types) | ({"secret"} if rules.allow_secrets else set())
    named = [(f"spec.volumes[{i}]", v) for i, v in enumerate(spec.volumes)]
    if spec.checkpoint.volume is not None:
        named.append(("spec.checkpoint.volume", spec.checkpoint.volume))
    out = []
    for field, volume in named:
        source = volume.source()
        if source not in allowed:
            out.append(_p(field, f"{source} volumes are not allowed here; allowed: {', '.join(sorted(allowed))}"))
        elif source == "projected" and not rules.allow_secrets and _projects_secret(volume.projected):
            out.append(_p(field, "projected secrets are not allowed here"))
    return out


def _projects_secret(projected: dict | None) -> bool:
    return any(isinstance(s, dict) and "secret" in s for s in (projected or {}).get("sources") or [])


def _env(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    if rules.allow_secrets:
        return []
    lists = [("spec.env", spec.env)] + [(f"spec.roles[{j}].env", r.env) for j, r in enumerate(spec.roles)]
    return [_p(f"{where}[{i}].valueFrom.secretKeyRef", "Secret references are not allowed here")
            for where, env in lists for i, e in enumerate(env)
            if e.value_from is not None and e.value_from.secret_key_ref is not None]


def _identity(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    out = []
    sa, sched = spec.service_account_name, spec.scheduling
    if sa is not None and sa not in rules.allowed_service_accounts:
        out.append(_p("spec.serviceAccountName", f"service account {sa!r} is not allowed here; allowed: {', '.join(rules.allowed_service_accounts) or 'none'}"))
    if sched.priority_class_name is not None and rules.allowed_priority_classes is not None \
            and sched.priority_class_name not in rules.allowed_priority_classes:
        out.append(_p("spec.scheduling.priorityClassName", f"priority class {sched.priority_class_name!r} is not allowed here; allowed: {', '.join(rules.allowed_priority_classes) or 'none'}"))
    if sched.scheduler_name is not None and sched.scheduler_name not in rules.allowed_scheduler_names:
        out.append(_p("spec.scheduling.schedulerName", f"scheduler {sched.scheduler_name!r} is not allowed here; allowed: {', '.join(rules.allowed_scheduler_names) or 'none'}"))
    profile = spec.network.profile
    if rules.allowed_network_profiles is not None and profile not in rules.allowed_network_profiles:
        out.append(_p("spec.network.profile", f"network profile {profile!r} is not allowed here; allowed: {', '.join(rules.allowed_network_profiles) or 'none'}"))
    return out


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


def policy_problems(spec: TrainingJobSpec, rules: PolicyRules) -> list[Problem]:
    return (_volumes(spec, rules) + _env(spec, rules) + _identity(spec, rules)
            + _placement(spec, rules) + _limits(spec, rules))
