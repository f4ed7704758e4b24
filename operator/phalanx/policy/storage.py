"""The cluster policy on checkpoint.storage: object storage only where one of the namespace's
grants (allowedCheckpointStorage) admits the job's URI, endpoint and credentials Secret together;
``{namespace}`` in a grant's URI keeps each namespace to its own prefix. Its twin on the API server
is policy/admission.py's storage validation."""

from __future__ import annotations

from phalanx.api.policy import PolicyRules
from phalanx.api.types import TrainingJobSpec
from phalanx.problems import Problem


def _p(field: str, message: str) -> Problem:
    return Problem(field, f"{message} (cluster policy)", "operator")


def storage_problems(spec: TrainingJobSpec, rules: PolicyRules, namespace: str) -> list[Problem]:
    """checkpoint.storage only where a grant of the namespace's admits its URI, endpoint and
    Secret together; the message says what the namespace may use."""
    st = spec.checkpoint.storage
    if st is None or any(g.admits(namespace, st.uri, st.endpoint, st.credentials_secret)
                         for g in rules.allowed_checkpoint_storage):
        return []
    grants = rules.allowed_checkpoint_storage
    if not grants:
        return [_p("spec.checkpoint.storage", "object storage is not allowed in this namespace by the cluster policy "
                                              "(allowedCheckpointStorage is empty): use checkpoint.volume")]
    allowed = "; ".join(f"{g.for_namespace(namespace)}/... at {g.endpoint or 'the provider endpoint'}"
                        f" with {', '.join(g.credentials_secrets) or 'no'} Secret" for g in grants)
    if not any(st.uri == g.for_namespace(namespace) or st.uri.startswith(g.for_namespace(namespace) + "/") for g in grants):
        field = "spec.checkpoint.storage.uri"
    elif not any(g.admits(namespace, st.uri, st.endpoint, None) for g in grants):
        field = "spec.checkpoint.storage.endpoint"
    else:
        field = "spec.checkpoint.storage.credentialsSecret"
    return [_p(field, f"not allowed by the cluster policy for this namespace; allowed: {allowed}")]
