"""A problem with a TrainingJob: the field and the rule, in words."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    field: str
    message: str
    # "api": the API server refuses it too (schema, CEL); "operator": only the operator's rules
    # (semantics, the cluster's config and policy, what CEL cannot afford) — refused before
    # anything exists.
    source: str = "api"

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"
