"""The cluster policy as ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, Kubernetes
>= 1.30): the API server refuses a TrainingJob at `kubectl apply` with the rule's words. One
policy + binding per policy entry, its values inlined as CEL `variables` (the chart renders them
from the same values the operator reads). Not a params ConfigMap: with a core-type paramKind the
API server loses param resolution for good once no binding names it for a moment (an uninstall,
a toggled value) — every TrainingJob is then denied until it restarts (kubernetes#141015, open
in 1.36). `make crds` writes the template (charts/phalanx/templates/admission-policy.yaml);
tests/unit/test_admission_policy.py checks it against this module. The operator checks the
same rules (policy/cluster.py) for clusters without the policy.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from phalanx import constants as C
from phalanx.api.kubetypes import VOLUME_SOURCES
from phalanx.api.policy import PolicyRules

POLICY_NAME = "phalanx-trainingjob-policy"
S = "object.spec"


def _volume_ok(var: str) -> str:
    return " && ".join(f"(!has({var}.{s}) || '{s}' in variables.allowedVolumes)" for s in VOLUME_SOURCES)


def _any_or_in(field: str, var: str) -> str:
    return f"variables.{var} == null || !has({S}.{field}) || {S}.{field} in variables.{var}"


def _limit(expr: str, var: str, op: str) -> str:
    return f"variables.{var} == null || {expr} {op} variables.{var}"


# Pods of spec.roles (Kubernetes CEL's list sum()); they count against maxNodes with the workers.
_ROLE_PODS = f"(has({S}.roles) ? {S}.roles.map(r, has(r.replicas) ? r.replicas : 1).sum() : 0)"

VALIDATIONS: list[dict[str, str]] = [
    {"expression": f"!has({S}.volumes) || {S}.volumes.all(v, {_volume_ok('v')})",
     "messageExpression": "'spec.volumes: a volume type the cluster policy does not allow; allowed: ' + variables.allowedVolumes.join(', ')"},
    {"expression": f"!has({S}.checkpoint) || !has({S}.checkpoint.volume) || ({_volume_ok(S + '.checkpoint.volume')})",
     "messageExpression": "'spec.checkpoint.volume: a volume type the cluster policy does not allow; allowed: ' + variables.allowedVolumes.join(', ')"},
    {"expression": f"variables.allowSecrets || !has({S}.env) || {S}.env.all(e, !has(e.valueFrom) || !has(e.valueFrom.secretKeyRef))",
     "message": "spec.env: Secret references (valueFrom.secretKeyRef) are not allowed by the cluster policy"},
    {"expression": f"variables.allowSecrets || !has({S}.roles) || {S}.roles.all(r, !has(r.env) || r.env.all(e, !has(e.valueFrom) || !has(e.valueFrom.secretKeyRef)))",
     "message": "spec.roles[].env: Secret references (valueFrom.secretKeyRef) are not allowed by the cluster policy"},
    {"expression": f"!has({S}.serviceAccountName) || {S}.serviceAccountName in variables.allowedServiceAccounts",
     "messageExpression": "'spec.serviceAccountName: not allowed by the cluster policy; allowed: ' + (size(variables.allowedServiceAccounts) == 0 ? 'none' : variables.allowedServiceAccounts.join(', '))"},
    {"expression": f"!has({S}.scheduling) || ({_any_or_in('scheduling.priorityClassName', 'allowedPriorityClasses')})",
     "messageExpression": "'spec.scheduling.priorityClassName: not allowed by the cluster policy; allowed: ' + variables.allowedPriorityClasses.join(', ')"},
    {"expression": f"!has({S}.scheduling) || !has({S}.scheduling.schedulerName) || {S}.scheduling.schedulerName in variables.allowedSchedulerNames",
     "messageExpression": "'spec.scheduling.schedulerName: not allowed by the cluster policy; allowed: ' + (size(variables.allowedSchedulerNames) == 0 ? 'none' : variables.allowedSchedulerNames.join(', '))"},
    {"expression": f"!has({S}.nodeSelector) || !{S}.nodeSelector.exists(k, k in variables.forbiddenNodeSelectorKeys)",
     "messageExpression": "'spec.nodeSelector: these node label keys are not allowed by the cluster policy: ' + variables.forbiddenNodeSelectorKeys.join(', ')"},
    {"expression": f"variables.allowKeylessTolerations || !has({S}.tolerations) || {S}.tolerations.all(t, has(t.key) && t.key != '')",
     "message": "spec.tolerations: a toleration without a key tolerates every taint; the cluster policy asks for the taint key"},
    {"expression": f"!has({S}.tolerations) || {S}.tolerations.all(t, !has(t.key) || !(t.key in variables.forbiddenTolerationKeys))",
     "messageExpression": "'spec.tolerations: tolerating these taints is not allowed by the cluster policy: ' + variables.forbiddenTolerationKeys.join(', ')"},
    {"expression": f"!has({S}.network) || ({_any_or_in('network.profile', 'allowedNetworkProfiles')})",
     "messageExpression": "'spec.network.profile: not allowed by the cluster policy; allowed: ' + variables.allowedNetworkProfiles.join(', ')"},
    {"expression": f"({_limit(S + '.nodes + ' + _ROLE_PODS, 'maxNodes', '<=')}) && (!has({S}.elastic) || {_limit(S + '.elastic.maxNodes + ' + _ROLE_PODS, 'maxNodes', '<=')})",
     "messageExpression": "'spec.nodes: at most ' + string(variables.maxNodes) + ' pods per job, workers and spec.roles together (cluster policy)'"},
    {"expression": f"!has({S}.failurePolicy) || ({_limit(S + '.failurePolicy.maxRestarts', 'maxRestarts', '<=')})",
     "messageExpression": "'spec.failurePolicy.maxRestarts: at most ' + string(variables.maxRestarts) + ' (cluster policy)'"},
    {"expression": f"!has({S}.failurePolicy) || ({_limit(S + '.failurePolicy.backoffSeconds', 'minRestartBackoffSeconds', '>=')})",
     "messageExpression": "'spec.failurePolicy.backoffSeconds: at least ' + string(variables.minRestartBackoffSeconds) + ' (cluster policy)'"},
]


def admission_policy(name: str = POLICY_NAME, rules: PolicyRules | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {C.LABEL_MANAGED_BY: C.MANAGED_BY}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [C.GROUP], "apiVersions": [C.VERSION], "resources": [C.PLURAL],
                "operations": ["CREATE", "UPDATE"]}]},
            "variables": policy_variables(rules or PolicyRules()),
            "validations": VALIDATIONS,
        },
    }


def policy_variables(rules: PolicyRules) -> list[dict[str, str]]:
    """A PolicyRules as CEL variables (JSON literals are CEL literals); null means any / no limit."""
    allowed_volumes = list(rules.allowed_volume_types) + (["secret"] if rules.allow_secrets else [])
    values = {
        "allowedVolumes": allowed_volumes,
        "allowSecrets": rules.allow_secrets,
        "allowedServiceAccounts": rules.allowed_service_accounts,
        "allowedPriorityClasses": rules.allowed_priority_classes,
        "allowedSchedulerNames": rules.allowed_scheduler_names,
        "forbiddenNodeSelectorKeys": rules.forbidden_node_selector_keys,
        "forbiddenTolerationKeys": rules.forbidden_toleration_keys,
        "allowKeylessTolerations": rules.allow_keyless_tolerations,
        "allowedNetworkProfiles": rules.allowed_network_profiles,
        "maxNodes": rules.max_nodes,
        "maxRestarts": rules.max_restarts,
        "minRestartBackoffSeconds": rules.min_restart_backoff_seconds,
    }
    # dyn(): a null literal is typed null in CEL; dyn lets the same variable be null or a value
    return [{"name": k, "expression": f"dyn({json.dumps(v, separators=(',', ':'))})"} for k, v in values.items()]


def admission_policy_template() -> str:
    """The chart's named template: one policy per entry, its variables from the entry's rules
    (templates/_helpers.tpl "phalanx.policyVariables" renders them as policy_variables does)."""
    body = admission_policy()
    body["metadata"]["name"] = "{{ .name }}"
    body["spec"]["variables"] = "VARIABLES"
    text = yaml.safe_dump(body, sort_keys=False, width=200)
    text = text.replace("  variables: VARIABLES\n", '  variables: {{- include "phalanx.policyVariables" .rules | nindent 2 }}\n')
    return ("{{- /* Generated from operator/phalanx/policy/admission.py by `make crds`. Do not edit. */ -}}\n"
            '{{- define "phalanx.admissionPolicy" }}\n' + text + "{{- end }}\n")
