"""Heterogeneous gangs: the roles of a job besides its workers, and when a job has succeeded.

A job's workers (``spec.nodes`` pods, the torch world) are role ``worker``. ``spec.roles`` adds
groups of pods of their own shape — parameter servers, a chief, an evaluator — each with its own
replicas, resources and (command jobs) command. Every pod of every role belongs to the one gang:
planned and released all or nothing, restarted together. Role pods are named
``<job>-<role>-<index>`` and resolve through the job's headless Service like the workers.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from phalanx import constants
from phalanx.api.base import Model, unique_by
from phalanx.api.kubetypes import EnvVar
from phalanx.api.resources import Resources
from phalanx.api.rules import Rule

# A role's pod hostname is "<job>-<role>-<index>": with a job name of at most 45 characters,
# 10 for the role and 5 digits of index it stays a DNS label (63).
MAX_ROLE_NAME = 10
ROLE_NAME = r"^[a-z][a-z0-9]*$"  # no '-': "<job>-<role>-<index>-<attempt>" parses one way only
RESERVED_ROLE_NAMES = (constants.ROLE_WORKER, "node")  # the workers' role, and their hostnames' infix
MAX_ROLES = 8
MAX_ROLE_REPLICAS = 1024


class Role(Model):
    """A group of pods in the job's gang besides the workers (parameter servers, a chief, an
    evaluator). Its pods are not ranks of the workers' torch world; they get the job's env,
    volumes and network wiring, and ``PHALANX_ROLE`` / ``PHALANX_ROLE_INDEX``."""

    name: str = Field(..., min_length=1, max_length=MAX_ROLE_NAME, pattern=ROLE_NAME,
                      description="Role name: lowercase letters and digits, e.g. ps, chief, evaluator (not worker or node).")
    replicas: int = Field(1, ge=1, le=MAX_ROLE_REPLICAS, description="Pods of this role (one per node).")
    resources: Resources = Field(
        default_factory=Resources,
        description="Per-pod resources of this role (default: none requested, e.g. CPU parameter servers).")
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, min_length=1, max_length=64, description="This role's command (default: spec.command).")
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=256, description="This role's args (default: spec.args).")
    env: list[EnvVar] = Field(default_factory=list, max_length=64, description="Env added after spec.env for this role.",
                              json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})

    checks = (
        Rule(" && ".join(f"self.name != '{n}'" for n in RESERVED_ROLE_NAMES),
             f"role names {' and '.join(RESERVED_ROLE_NAMES)} are reserved (the workers are spec.nodes)",
             lambda r: r.name not in RESERVED_ROLE_NAMES, ".name"),
    )

    @field_validator("env")
    @classmethod
    def _env_unique(cls, v: list[EnvVar]) -> list[EnvVar]:
        return unique_by(v, "name", "env name")


class SuccessPolicy(Model):
    """When the job has succeeded: every pod of ``roles`` exited 0 (the others are then stopped)."""

    roles: list[Annotated[str, Field(max_length=MAX_ROLE_NAME)]] = Field(
        ..., min_length=1, max_length=MAX_ROLES + 1,
        description="Roles whose pods must all succeed (worker is the workers); default: every role; for "
        "framework tensorflow the chief, or the workers without one (an evaluator never decides).")


_HAS_ROLES = "has(self.roles) && size(self.roles) > 0"

ROLE_RULES = (
    Rule(f"!({_HAS_ROLES}) || !self.network.hostNetwork",
         "spec.roles with network.hostNetwork is not supported: a role pod may share a node with a worker "
         "or another role's pod, and on the host network they would claim the same ports",
         lambda s: not s.roles or not s.network.host_network, ".roles"),
    Rule(f"!({_HAS_ROLES}) || (has(self.command) && !has(self.model))",
         "spec.roles run your own command (spec.command); the built-in runtime (spec.model) trains on the "
         "worker pods only (its parameter servers are parallelism.parameterServer)",
         lambda s: not s.roles or (s.command is not None and s.model is None), ".roles"),
    Rule("!has(self.successPolicy) || self.successPolicy.roles.all(n, n == 'worker' || "
         "(has(self.roles) && self.roles.exists(r, r.name == n)))",
         "spec.successPolicy.roles names worker or a role of spec.roles",
         lambda s: s.success_policy is None
         or set(s.success_policy.roles) <= {constants.ROLE_WORKER} | {r.name for r in s.roles}, ".successPolicy.roles"),
)
