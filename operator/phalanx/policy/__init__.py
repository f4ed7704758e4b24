"""Shared-cluster safety (pure): the admin's policy and Pod Security levels, checked against a
job before anything is created. The chart's ValidatingAdmissionPolicy enforces the same rules at
`kubectl apply` (policy/admission.py generates it)."""

from phalanx.policy.cluster import policy_problems
from phalanx.policy.podsecurity import pod_security_problems

__all__ = ["pod_security_problems", "policy_problems"]
