"""The pods of a gang, one ``Slot`` each: the workers (node-ranks) first, then every role's
replicas in ``spec.roles`` order (pure).

A worker's hostname is ``<job>-node-<rank>``; a role pod's is ``<job>-<role>-<index>``. Pod
names add the restart attempt. Pods carry their slot in labels (``phalanx.dev/role`` and
``phalanx.dev/role-index``; workers also ``phalanx.dev/node-rank``), which is how the operator
reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx import constants
from phalanx.api.roles import Role
from phalanx.api.types import Resources, TrainingJobSpec


@dataclass(frozen=True, order=True)
class Slot:
    role: str
    index: int  # node-rank for workers; the index within the role otherwise

    @property
    def is_worker(self) -> bool:
        return self.role == constants.ROLE_WORKER

    def __str__(self) -> str:
        return f"node-rank {self.index}" if self.is_worker else f"{self.role} {self.index}"


def worker(rank: int) -> Slot:
    return Slot(constants.ROLE_WORKER, rank)


def slots(spec: TrainingJobSpec) -> list[Slot]:
    """Every pod of the gang: workers in rank order, then each role's replicas."""
    out = [worker(r) for r in range(spec.nodes)]
    for role in spec.roles:
        out += [Slot(role.name, i) for i in range(role.replicas)]
    return out


def role_counts(spec: TrainingJobSpec) -> dict[str, int]:
    """Replicas per role, workers first (the order of ``slots``)."""
    return {constants.ROLE_WORKER: spec.nodes, **{r.name: r.replicas for r in spec.roles}}


def worker_hostname(job: str, rank: int) -> str:
    return f"{job}-node-{rank}"


def service_name(job: str) -> str:
    """The job's headless Service, through which every pod's hostname resolves."""
    return job


def master_addr(job: str) -> str:
    """Stable DNS name of node-rank 0 through the headless Service."""
    return f"{worker_hostname(job, 0)}.{service_name(job)}"


def slot_hostname(job: str, slot: Slot) -> str:
    return worker_hostname(job, slot.index) if slot.is_worker else f"{job}-{slot.role}-{slot.index}"


def slot_pod_name(job: str, slot: Slot, attempt: int) -> str:
    return f"{slot_hostname(job, slot)}-{attempt}"


def slot_labels(spec: TrainingJobSpec, slot: Slot) -> dict[str, str]:
    """A worker of a job without roles keeps only its node-rank label (its pods do not change)."""
    labels = {constants.LABEL_NODE_RANK: str(slot.index)} if slot.is_worker else {}
    if spec.roles:
        labels |= {constants.LABEL_ROLE: slot.role, constants.LABEL_ROLE_INDEX: str(slot.index)}
    return labels


def slot_of(pod: dict[str, Any]) -> Slot | None:
    """The slot a pod's labels name (None for a pod without them)."""
    labels = pod.get("metadata", {}).get("labels") or {}
    try:
        if constants.LABEL_ROLE in labels:
            return Slot(labels[constants.LABEL_ROLE], int(labels[constants.LABEL_ROLE_INDEX]))
        if constants.LABEL_NODE_RANK in labels:
            return worker(int(labels[constants.LABEL_NODE_RANK]))
    except (KeyError, ValueError):
        return None
    return None


def role_of(spec: TrainingJobSpec, name: str) -> Role | None:
    """The ``spec.roles`` entry named ``name`` (None for the workers)."""
    return next((r for r in spec.roles if r.name == name), None)


def slot_resources(spec: TrainingJobSpec, slot: Slot) -> Resources:
    """Per-pod resources of ``slot``: its role's, or the workers' ``spec.resources``."""
    role = role_of(spec, slot.role)
    return role.resources if role is not None else spec.resources


def slot_command(spec: TrainingJobSpec, slot: Slot) -> tuple[list[str] | None, list[str] | None]:
    """(command, args) of ``slot``'s container: a role's own command with only its own args, else
    ``spec.command`` with the role's args or ``spec.args``; command None for the built-in runtime."""
    role = role_of(spec, slot.role)
    if role is not None and role.command is not None:
        return list(role.command), list(role.args) if role.args is not None else None
    args = role.args if role is not None and role.args is not None else spec.args
    return (list(spec.command) if spec.command else None), (list(args) if args else None)
