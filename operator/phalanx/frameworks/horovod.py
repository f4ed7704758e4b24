"""``framework: horovod``: Horovod's gloo rendezvous env of a command job (pure: job in, env out).

Horovod 0.28.1 meets without horovodrun and ssh when each process finds in its environment what
horovodrun's gloo launcher would have put there (docs/horovod.md, "Running without horovodrun").
Every pod ``r`` of ``N`` (a Horovod host with ``P = procsPerNode`` slots) gets::

    HOROVOD_GLOO_RENDEZVOUS_ADDR   <job>-node-0.<job>     worker 0's stable name (MASTER_ADDR)
    HOROVOD_GLOO_RENDEZVOUS_PORT   29502                  pod 0's HTTP rendezvous server
    HOROVOD_CONTROLLER             gloo
    HOROVOD_CPU_OPERATIONS         gloo
    HOROVOD_GLOO_TIMEOUT_SECONDS   600                    the latest a peer may reach hvd.init()
    HOROVOD_HOSTNAME               <job>-node-<r>         the pod's hostname (scope local_<host>)
    HOROVOD_SIZE / LOCAL_SIZE      N × P / P
    HOROVOD_CROSS_RANK / CROSS_SIZE  r / N                 hosts are uniform: cross rank = pod rank
    HOROVOD_RANK / LOCAL_RANK      r / 0                  only when P = 1 (one process: the pod's)

With ``P > 1`` the rank and local rank are a process's, not the pod's: the launcher
(``python -m phalanx_runtime.horovod_launch -- CMD``) starts ``P`` copies of the command with
``HOROVOD_RANK = r × P + l`` and ``HOROVOD_LOCAL_RANK = l``. The launcher also runs the rendezvous
server in pod 0 (the plan ``<job>-node-0:P,…,<job>-node-<N-1>:P``, the same names as
HOROVOD_HOSTNAME) and makes every pod wait until it answers. Gloo's own pairs listen on ephemeral
ports, which the job's NetworkPolicy admits from the gang. What Horovod cannot honour is refused
by the spec's rules (api/horovod.py) before anything is rendered.
"""

from __future__ import annotations

from typing import Any

from phalanx import constants
from phalanx.api.horovod import HOROVOD_RULES
from phalanx.api.slots import Slot, master_addr, slot_hostname
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.frameworks.base import FrameworkPlugin


def uses_horovod(spec: TrainingJobSpec) -> bool:
    return spec.framework == Framework.HOROVOD


def horovod_ranks(spec: TrainingJobSpec, pod_rank: int) -> dict[str, int]:
    """The pod's place among the Horovod hosts; its process's rank too when it has one process."""
    nodes, procs = spec.nodes, spec.procs_per_node
    ranks = {constants.ENV_HOROVOD_SIZE: nodes * procs, constants.ENV_HOROVOD_LOCAL_SIZE: procs,
             constants.ENV_HOROVOD_CROSS_RANK: pod_rank, constants.ENV_HOROVOD_CROSS_SIZE: nodes}
    if procs == 1:
        ranks |= {constants.ENV_HOROVOD_RANK: pod_rank, constants.ENV_HOROVOD_LOCAL_RANK: 0}
    return ranks


def horovod_env(job: TrainingJob, slot: Slot) -> list[dict[str, Any]]:
    """The pod's Horovod env (none unless the job is ``framework: horovod``). Horovod's server has
    its own port, ``HOROVOD_RENDEZVOUS_PORT``, not the torch rendezvous port."""
    if not uses_horovod(job.spec) or not slot.is_worker:
        return []
    name = job.metadata.name
    env = {
        constants.ENV_HOROVOD_RENDEZVOUS_ADDR: master_addr(name),
        constants.ENV_HOROVOD_RENDEZVOUS_PORT: constants.HOROVOD_RENDEZVOUS_PORT,
        constants.ENV_HOROVOD_CONTROLLER: constants.HOROVOD_GLOO,
        constants.ENV_HOROVOD_CPU_OPERATIONS: constants.HOROVOD_GLOO,
        constants.ENV_HOROVOD_GLOO_TIMEOUT: constants.HOROVOD_GLOO_TIMEOUT_SECONDS,
        constants.ENV_HOROVOD_HOSTNAME: slot_hostname(name, slot),
        **horovod_ranks(job.spec, slot.index),
    }
    return [{"name": k, "value": str(v)} for k, v in env.items()]


def horovod_port(job: TrainingJob) -> list[dict[str, Any]]:
    """The container port of pod 0's rendezvous server (declared by every pod of a horovod job)."""
    if not uses_horovod(job.spec):
        return []
    return [{"name": constants.PORT_NAME_HOROVOD, "containerPort": constants.HOROVOD_RENDEZVOUS_PORT, "protocol": "TCP"}]


def horovod_service_port(job: TrainingJob) -> list[dict[str, Any]]:
    """The headless Service's entry for the rendezvous server (horovod jobs only)."""
    if not uses_horovod(job.spec):
        return []
    port = constants.HOROVOD_RENDEZVOUS_PORT
    return [{"name": constants.PORT_NAME_HOROVOD, "port": port, "targetPort": port, "protocol": "TCP"}]


class Horovod(FrameworkPlugin):
    framework = Framework.HOROVOD
    rules = HOROVOD_RULES

    def slot_env(self, job: TrainingJob, slot: Slot, master_port: int) -> list[dict[str, Any]]:
        return horovod_env(job, slot)

    def container_ports(self, job: TrainingJob) -> list[dict[str, Any]]:
        return horovod_port(job)

    def service_ports(self, job: TrainingJob) -> list[dict[str, Any]]:
        return horovod_service_port(job)


PLUGIN = Horovod()
