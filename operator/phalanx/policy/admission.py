"""The cluster policy as ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1: needs
Kubernetes >= 1.30, tested on v1.36.3): the API server refuses a TrainingJob or TrainingSweep at
`kubectl apply` with the rule's words. One policy + binding per policy entry, its values inlined as CEL `variables` (the chart
renders them from the same values the operator reads, a missing value taking the operator's
default). Not a params ConfigMap: with a core-type paramKind the API server loses param
resolution for good once no binding names it for a moment (an uninstall, a toggled value) —
every TrainingJob is then denied until it restarts (kubernetes#141015, open in 1.36). `make crds`
writes the template (charts/phalanx/templates/admission-policy.yaml); tests/unit/phalanx/policy/test_admission.py
checks it against this module. The operator checks the same rules (policy/cluster.py) for
clusters without the policy.

A sweep is held to the rules twice: its template as a job, and every value a parameter or a
list trial gives a field the policy looks at (policy/cluster.py SWEEP_POLICY_PATHS), as the
template with that value. Absent fields take the CRD's defaults, spelled out here too (an
object stored before a default existed, a template without the parent object).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml

from phalanx import constants
from phalanx.api.kubetypes import VOLUME_SOURCES
from phalanx.api.policy import (
    BACKEND_SCHEDULER_NAMES,
    NAMESPACE_PLACEHOLDER,
    SYSTEM_PRIORITY_PREFIX,
    VOLUME_SECRET_REFS,
    PolicyRules,
)
from phalanx.api.types import FailurePolicy, NetworkSpec, SchedulingSpec, TrainingJobSpec
from phalanx.policy.cluster import SWEEP_FIXED_PREFIXES, SWEEP_POLICY_PATHS

POLICY_NAME = "phalanx-trainingjob-policy"
S = "variables.spec"  # the job's spec, or the sweep's template's
AT = "variables.at + "  # its field path in messages: 'spec.' or 'spec.template.spec.'


def _lit(value: Any) -> str:
    """A CEL literal (JSON's are CEL's)."""
    return json.dumps(value, separators=(",", ":"))


def _get(obj: str, path: str, default: Any) -> str:
    """``obj.path`` with the default of an absent field (or parent)."""
    parts = path.split(".")
    present = " && ".join(f"has({'.'.join([obj, *parts[:i + 1]])})" for i in range(len(parts)))
    return f"({present} ? {obj}.{path} : {_lit(default)})"


_BACKEND = _get(S, "scheduling.backend", str(SchedulingSpec.model_fields["backend"].default))
_PROFILE = _get(S, "network.profile", NetworkSpec.model_fields["profile"].default)
_MAX_RESTARTS = _get(S, "failurePolicy.maxRestarts", FailurePolicy.model_fields["max_restarts"].default)
_BACKOFF = _get(S, "failurePolicy.backoffSeconds", FailurePolicy.model_fields["backoff_seconds"].default)
_NODES = _get(S, "nodes", TrainingJobSpec.model_fields["nodes"].default)


def _implied_scheduler(backend: str) -> str:
    """The schedulerName a backend sets when the job names none ('' for kube-scheduler)."""
    out = "''"
    for name, scheduler in BACKEND_SCHEDULER_NAMES.items():
        out = f"({backend} == '{name}' ? '{scheduler}' : {out})"
    return out


# Derived variables, after the entry's values: what the job is, and the policy's sets.
DERIVED = [
    ("isSweep", f"object.kind == '{constants.SWEEP_KIND}'"),
    ("spec", "variables.isSweep ? object.spec.template.spec : object.spec"),
    ("at", "variables.isSweep ? 'spec.template.spec.' : 'spec.'"),
    ("params", "variables.isSweep && has(object.spec.parameters) ? object.spec.parameters : []"),
    ("trials", "variables.isSweep && has(object.spec.trials) ? object.spec.trials : []"),
    # secret only with allowSecrets, whatever the lists say
    ("allowedVolumes", "variables.allowedVolumeTypes.filter(t, t != 'secret') + (variables.allowSecrets ? ['secret'] : [])"),
    ("allowedProjected", "variables.allowedProjectedSources.filter(t, t != 'secret') + (variables.allowSecrets ? ['secret'] : [])"),
    # pods of spec.roles (Kubernetes CEL's list sum()); they count against maxNodes with the workers
    ("rolePods", f"has({S}.roles) ? {S}.roles.map(r, has(r.replicas) ? r.replicas : 1).sum() : 0"),
    ("backend", _BACKEND),
    ("schedulerName", _get(S, "scheduling.schedulerName", "")),
]


def _names(var: str, none: str = "none") -> str:
    return f"(size(variables.{var}) == 0 ? '{none}' : variables.{var}.join(', '))"


# --- One value of a field, as a CEL predicate on ``x`` (dyn in a sweep's parameters) ---------
# A value of the wrong type is the operator's to refuse (its type check), not the policy's.

def _str(check: str) -> Callable[[str], str]:
    return lambda x: f"(type({x}) != string || {check.format(x=x)})"


def _int(check: str) -> Callable[[str], str]:
    return lambda x: f"(type({x}) != int || {check.format(x=x)})"


_PRIORITY_OK = ("(variables.allowedPriorityClasses == null ? !{x}.startsWith('" + SYSTEM_PRIORITY_PREFIX + "') "
                ": {x} in variables.allowedPriorityClasses)")
_NODES_OK = "variables.maxNodes == null || {x} + variables.rolePods <= variables.maxNodes"
_RESTARTS_OK = "variables.maxRestarts == null || {x} <= variables.maxRestarts"
_BACKOFF_OK = "{x} >= variables.minRestartBackoffSeconds"


def _backend_ok(x: str, named: str) -> str:
    """A backend value: allowed, and so is its scheduler unless the trial names one (``named``)."""
    implied = _implied_scheduler(x)
    return (f"(type({x}) != string || ({x} in variables.allowedBackends && "
            f"({named} || {implied} == '' || {implied} in variables.allowedSchedulerNames)))")


# path → (value predicate, predicate on a range ``r`` by its whole-number ends, the rule in words)
_VALUE_RULES: dict[str, tuple[Callable[[str], str] | None, str | None, str]] = {
    "nodes": (_int(_NODES_OK), "variables.maxNodes == null || double(r.max) < double(variables.maxNodes - variables.rolePods + 1)",
              "' at most ' + string(variables.maxNodes) + ' pods per job, workers and spec.roles together'"),
    "elastic.maxNodes": (_int(_NODES_OK), "variables.maxNodes == null || double(r.max) < double(variables.maxNodes - variables.rolePods + 1)",
                         "' at most ' + string(variables.maxNodes) + ' pods per job, workers and spec.roles together'"),
    "serviceAccountName": (_str("{x} in variables.allowedServiceAccounts"), None,
                           "' allowed service accounts: ' + " + _names("allowedServiceAccounts")),
    "scheduling.backend": (None, None,  # with the trial's schedulerName: see _sweep_values
                           "' allowed backends: ' + " + _names("allowedBackends") + " + '; schedulers: ' + " + _names("allowedSchedulerNames", "kube-scheduler only")),
    "scheduling.schedulerName": (_str("{x} in variables.allowedSchedulerNames"), None,
                                 "' allowed: ' + " + _names("allowedSchedulerNames", "kube-scheduler only")),
    "scheduling.queue": (_str("variables.allowedQueues == null || {x} in variables.allowedQueues"), None,
                         "' allowed: ' + " + _names("allowedQueues")),
    "scheduling.priorityClassName": (_str(_PRIORITY_OK), None,
                                     f"' allowed: ' + (variables.allowedPriorityClasses == null ? 'any but {SYSTEM_PRIORITY_PREFIX}*' : " + _names("allowedPriorityClasses") + ")"),
    "network.profile": (_str("variables.allowedNetworkProfiles == null || {x} in variables.allowedNetworkProfiles"), None,
                        "' allowed: ' + " + _names("allowedNetworkProfiles")),
    "failurePolicy.maxRestarts": (_int(_RESTARTS_OK), "variables.maxRestarts == null || double(r.max) < double(variables.maxRestarts + 1)",
                                  "' at most ' + string(variables.maxRestarts)"),
    "failurePolicy.backoffSeconds": (_int(_BACKOFF_OK), "double(r.min) > double(variables.minRestartBackoffSeconds - 1)",
                                     "' at least ' + string(variables.minRestartBackoffSeconds)"),
}
assert set(_VALUE_RULES) == set(SWEEP_POLICY_PATHS)


def _v(expression: str, message: str) -> dict[str, str]:
    """A validation; ``message`` is a CEL string expression."""
    return {"expression": expression, "messageExpression": message}


def _volume_validations(field: str, each: Callable[[str], str]) -> list[dict[str, str]]:
    """The same three checks on spec.volumes[] and spec.checkpoint.volume."""
    types = " && ".join(f"(!has(v.{s}) || '{s}' in variables.allowedVolumes)" for s in VOLUME_SOURCES)
    refs = " && ".join(f"!(has(v.{s}) && has(v.{s}.{ref}))" for s, ref in VOLUME_SECRET_REFS.items())
    projected = "!has(v.projected) || !has(v.projected.sources) || v.projected.sources.all(s, s.all(k, k in variables.allowedProjected))"
    return [
        _v(each(types), f"{AT}'{field}: a volume type the cluster policy does not allow; allowed: ' + variables.allowedVolumes.join(', ')"),
        _v(f"variables.allowSecrets || {each(refs)}",
           f"{AT}'{field}: a volume source names a Secret ({', '.join(f'{s}.{r}' for s, r in VOLUME_SECRET_REFS.items())}); "
           "the cluster policy does not allow Secrets'"),
        _v(each(projected), f"{AT}'{field}: a projected source the cluster policy does not allow; allowed: ' + variables.allowedProjected.join(', ')"),
    ]


# Not a policy rule but EnvVar's (api/kubetypes.py), for the env the CRD gives as a map: CEL there
# cannot afford a map's unbounded keys, an admission policy's budget is per request.
NCCL_ENV_MESSAGE = (f"{', '.join(p + '*' for p in constants.ENV_DEVICE_GRANT_PREFIXES)}, {', '.join(constants.ENV_DEVICE_GRANT_NAMES)} "
                    f"(device grants) and {', '.join(constants.RENDEZVOUS_ENV)} (rendezvous) are not the job's to set, as in spec.env")


def _not_reserved_env(k: str) -> str:
    device = [f"!{k}.startsWith('{p}')" for p in constants.ENV_DEVICE_GRANT_PREFIXES]
    return " && ".join([*device, f"!({k} in {_lit(list(constants.ENV_DEVICE_GRANT_NAMES + constants.RENDEZVOUS_ENV))})"])


_STORAGE = f"{S}.checkpoint.storage"
# A grant's prefix for the request's namespace, and whether it holds the job's URI.
_GRANT_PREFIX = f"g.uri.replace('{NAMESPACE_PLACEHOLDER}', request.namespace)"
_UNDER_GRANT = f"({_STORAGE}.uri == {_GRANT_PREFIX} || {_STORAGE}.uri.startsWith({_GRANT_PREFIX} + '/'))"
# A grant's fields at their defaults may be absent from the values (null endpoint, no Secrets).
_GRANT_ENDPOINT = (f"(has({_STORAGE}.endpoint) ? has(g.endpoint) && g.endpoint != null && {_STORAGE}.endpoint == g.endpoint "
                   ": !has(g.endpoint) || g.endpoint == null)")
_GRANT_SECRET = (f"(!has({_STORAGE}.credentialsSecret) || "
                 f"(has(g.credentialsSecrets) && {_STORAGE}.credentialsSecret in g.credentialsSecrets))")


def _storage_validations() -> list[dict[str, str]]:
    """checkpoint.storage only under a grant that admits its URI, endpoint and Secret together
    (policy/cluster.py _storage; the operator's message lists the grants, this one the rule)."""
    absent = f"!has({S}.checkpoint) || !has({_STORAGE})"
    return [_v(f"{absent} || variables.allowedCheckpointStorage.exists(g, {_UNDER_GRANT} && {_GRANT_ENDPOINT} && {_GRANT_SECRET})",
               f"{AT}'checkpoint.storage: not allowed by the cluster policy for this namespace (uri, endpoint and "
               f"credentialsSecret must match one of allowedCheckpointStorage; allowed prefixes: ' + "
               f"(size(variables.allowedCheckpointStorage) == 0 ? 'none' : variables.allowedCheckpointStorage.map(g, {_GRANT_PREFIX}).join(', ')) + ')'")]


def _job_validations() -> list[dict[str, str]]:
    """The rules on one spec (a job's, or a sweep's template)."""
    volumes = _volume_validations("volumes", lambda e: f"!has({S}.volumes) || {S}.volumes.all(v, {e})")
    checkpoint = _volume_validations(
        "checkpoint.volume", lambda e: f"!has({S}.checkpoint) || !has({S}.checkpoint.volume) || [{S}.checkpoint.volume].all(v, {e})")
    secret_env = "!has({0}) || {0}.all(e, !has(e.valueFrom) || !has(e.valueFrom.secretKeyRef))"
    pc = f"{S}.scheduling.priorityClassName"
    queue = f"{S}.scheduling.queue"
    implied = _implied_scheduler("variables.backend")
    return volumes + checkpoint + _storage_validations() + [
        _v(f"!has({S}.network) || !has({S}.network.ncclEnv) || {S}.network.ncclEnv.all(k, {_not_reserved_env('k')})",
           f"{AT}'network.ncclEnv: ' + {_lit(NCCL_ENV_MESSAGE)}"),
        _v(f"variables.allowSecrets || ({secret_env.format(S + '.env')})",
           f"{AT}'env: Secret references (valueFrom.secretKeyRef) are not allowed by the cluster policy'"),
        _v(f"variables.allowSecrets || !has({S}.roles) || {S}.roles.all(r, {secret_env.format('r.env')})",
           f"{AT}'roles[].env: Secret references (valueFrom.secretKeyRef) are not allowed by the cluster policy'"),
        _v(f"!has({S}.serviceAccountName) || {S}.serviceAccountName in variables.allowedServiceAccounts",
           f"{AT}'serviceAccountName: not allowed by the cluster policy; allowed: ' + {_names('allowedServiceAccounts')}"),
        _v("variables.backend in variables.allowedBackends",
           f"{AT}'scheduling.backend: not allowed by the cluster policy: ' + variables.backend + '; allowed: ' + {_names('allowedBackends')}"),
        _v("variables.schedulerName == '' || variables.schedulerName in variables.allowedSchedulerNames",
           f"{AT}'scheduling.schedulerName: not allowed by the cluster policy: ' + variables.schedulerName + '; allowed: ' "
           f"+ {_names('allowedSchedulerNames', 'kube-scheduler only')}"),
        _v(f"variables.schedulerName != '' || {implied} == '' || {implied} in variables.allowedSchedulerNames",
           f"{AT}'scheduling.backend: its scheduler is not allowed by the cluster policy: ' + {implied} + '; allowed: ' "
           f"+ {_names('allowedSchedulerNames', 'kube-scheduler only')}"),
        _v(f"variables.allowedQueues == null || !has({S}.scheduling) || !has({queue}) || {queue} in variables.allowedQueues",
           f"{AT}'scheduling.queue: not allowed by the cluster policy; allowed: ' + {_names('allowedQueues')}"),
        _v(f"!has({S}.scheduling) || !has({pc}) || {_PRIORITY_OK.format(x=pc)}",
           f"{AT}'scheduling.priorityClassName: not allowed by the cluster policy; allowed: ' + (variables.allowedPriorityClasses == null "
           f"? 'any but {SYSTEM_PRIORITY_PREFIX}*' : {_names('allowedPriorityClasses')})"),
        _v(f"!has({S}.nodeSelector) || !{S}.nodeSelector.exists(k, k in variables.forbiddenNodeSelectorKeys)",
           f"{AT}'nodeSelector: these node label keys are not allowed by the cluster policy: ' + variables.forbiddenNodeSelectorKeys.join(', ')"),
        _v(f"variables.allowKeylessTolerations || !has({S}.tolerations) || {S}.tolerations.all(t, has(t.key) && t.key != '')",
           f"{AT}'tolerations: a toleration without a key tolerates every taint; the cluster policy asks for the taint key'"),
        _v(f"!has({S}.tolerations) || {S}.tolerations.all(t, !has(t.key) || !(t.key in variables.forbiddenTolerationKeys))",
           f"{AT}'tolerations: tolerating these taints is not allowed by the cluster policy: ' + variables.forbiddenTolerationKeys.join(', ')"),
        _v(f"variables.allowedNetworkProfiles == null || {_PROFILE} in variables.allowedNetworkProfiles",
           f"{AT}'network.profile: not allowed by the cluster policy: ' + {_PROFILE} + '; allowed: ' + {_names('allowedNetworkProfiles')}"),
        _v(f"variables.maxNodes == null || ({_NODES} + variables.rolePods <= variables.maxNodes && "
           f"(!has({S}.elastic) || !has({S}.elastic.maxNodes) || {S}.elastic.maxNodes + variables.rolePods <= variables.maxNodes))",
           f"{AT}'nodes: at most ' + string(variables.maxNodes) + ' pods per job, workers and spec.roles together (cluster policy)'"),
        _v(f"variables.maxRestarts == null || {_MAX_RESTARTS} <= variables.maxRestarts",
           f"{AT}'failurePolicy.maxRestarts: at most ' + string(variables.maxRestarts) + ' (cluster policy)'"),
        _v(f"{_BACKOFF} >= variables.minRestartBackoffSeconds",
           f"{AT}'failurePolicy.backoffSeconds: at least ' + string(variables.minRestartBackoffSeconds) + ' (cluster policy)'"),
    ]


def _sweep_values(path: str) -> dict[str, str]:
    """Every value a sweep's parameters (a range by its ends) or list trials give ``path``."""
    check, range_ok, rule = _VALUE_RULES[path]
    if check is None:  # the backend: its scheduler counts unless the trial names one
        def in_params(x: str) -> str:
            return _backend_ok(x, "variables.schedulerName != '' || variables.params.exists(q, q.path == 'scheduling.schedulerName')")

        def in_trial(x: str) -> str:
            return _backend_ok(x, "variables.schedulerName != '' || 'scheduling.schedulerName' in t")
    else:
        in_params = in_trial = check
    ranged = f" && (!has(p.range) || [p.range].all(r, {range_ok}))" if range_ok else ""
    params = f"variables.params.all(p, p.path != '{path}' || ((!has(p.values) || p.values.all(x, {in_params('x')})){ranged}))"
    trials = f"variables.trials.all(t, !('{path}' in t) || {in_trial(f't[{_lit(path)}]')})"
    return _v(f"{params} && {trials}",
              f"'spec.parameters, spec.trials: a value of {path} the cluster policy does not allow;' + {rule}")


def _sweep_validations() -> list[dict[str, str]]:
    fixed = " || ".join(f"{{x}}.startsWith('{p}')" for p in SWEEP_FIXED_PREFIXES)
    return [_v(f"variables.params.all(p, !({fixed.format(x='p.path')})) && "
               f"variables.trials.all(t, t.all(k, !({fixed.format(x='k')})))",
               f"'spec.parameters, spec.trials: {', '.join(p + '*' for p in SWEEP_FIXED_PREFIXES)}: volumes and storage "
               "are checked in the template; the cluster policy does not let a sweep vary them'")] + [_sweep_values(p) for p in SWEEP_POLICY_PATHS]


VALIDATIONS: list[dict[str, str]] = _job_validations() + _sweep_validations()
# Only what a request changes: a job or sweep stored before a stricter policy keeps its finalizers,
# status and labels updatable (the operator must still be able to clean it up).
MATCH_CONDITIONS = [{"name": "spec-written", "expression": "request.operation == 'CREATE' || object.spec != oldObject.spec"}]


def admission_policy(name: str = POLICY_NAME, rules: PolicyRules | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {constants.LABEL_MANAGED_BY: constants.MANAGED_BY}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [constants.GROUP], "apiVersions": [constants.VERSION], "resources": [constants.PLURAL, constants.SWEEP_PLURAL],
                "operations": ["CREATE", "UPDATE"]}]},
            "matchConditions": MATCH_CONDITIONS,
            "variables": policy_variables(rules or PolicyRules()) + derived_variables(),
            "validations": VALIDATIONS,
        },
    }


def policy_values(rules: PolicyRules) -> dict[str, Any]:
    """A PolicyRules as the chart's values spell it (null: any / no limit), by name."""
    return dict(sorted(rules.model_dump(by_alias=True, mode="json").items()))


def policy_variables(rules: PolicyRules) -> list[dict[str, str]]:
    """The entry's values as CEL variables, sorted by name as Helm's range sorts them."""
    # dyn(): a null literal is typed null in CEL; dyn lets the same variable be null or a value
    return [{"name": k, "expression": f"dyn({storage_grants_cel(v) if k == 'allowedCheckpointStorage' else _lit(v)})"}
            for k, v in policy_values(rules).items()]


def storage_grants_cel(grants: list[dict[str, Any]]) -> str:
    """The grants as CEL with each value dyn(): the API server refuses a map literal whose values
    differ in type (a string URI beside a list of Secrets). The chart's "phalanx.storageGrants" twin."""
    return "[" + ",".join(
        f'{{"uri":dyn({_lit(g["uri"])}),"endpoint":dyn({_lit(g.get("endpoint") or None)}),'
        f'"credentialsSecrets":dyn({_lit(g.get("credentialsSecrets") or [])})}}' for g in grants) + "]"


def derived_variables() -> list[dict[str, str]]:
    return [{"name": k, "expression": e} for k, e in DERIVED]


def admission_policy_template() -> str:
    """The chart's named templates: the operator's defaults (``phalanx.policyDefaults``, JSON:
    templates/_helpers.tpl "phalanx.policyVariables" fills an entry's missing values from it) and
    one policy per entry."""
    body = admission_policy()
    body["metadata"]["name"] = "{{ .name }}"
    body["spec"]["variables"] = derived_variables()
    text = yaml.safe_dump(body, sort_keys=False, width=200)
    assert text.count("  variables:\n") == 1
    text = text.replace("  variables:\n", '  variables: {{- include "phalanx.policyVariables" .rules | nindent 2 }}\n')
    defaults = _lit(policy_values(PolicyRules()))
    return ("{{- /* Generated from operator/phalanx/policy/admission.py by `make crds`. Do not edit. */ -}}\n"
            '{{- define "phalanx.policyDefaults" }}' + defaults.replace("{{", "{{ `{{` }}") + "{{ end }}\n"
            '{{- define "phalanx.admissionPolicy" }}\n' + text + "{{- end }}\n")
