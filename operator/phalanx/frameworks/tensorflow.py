"""``framework: tensorflow``: the TF_CONFIG of a command job (pure: job in, env out).

Every pod runs one TensorFlow worker (``procsPerNode`` 1) and gets the whole cluster spec and its
own task in ``$TF_CONFIG``, as ``tf.distribute.MultiWorkerMirroredStrategy`` reads it::

    {"cluster": {"worker": ["<job>-node-0.<job>.<ns>.svc:<port>", ...]},
     "task": {"type": "worker", "index": <node rank>}}

The addresses are the pods' stable DNS names through the job's headless Service (the names the
torch rendezvous uses for MASTER_ADDR), in node-rank order, on the rendezvous port (the port the
pod declares, the Service publishes and the job's NetworkPolicy lets the gang reach; under
hostNetwork, the job's host port). Without a chief role, worker 0 is MWMS's chief. With
``spec.roles`` (chief, ps, evaluator: api/roles.py) the cluster spec lists every task type and
each pod's task is its role and index — what ``ParameterServerStrategy`` reads; the evaluator
gets its task but stays out of the cluster spec, as TensorFlow expects.
``phalanx local`` renders the same with 127.0.0.1 ports (:func:`tf_config` on local addresses).
What does not fit one worker per pod is refused by the spec's rules (api/tensorflow.py) before
anything is rendered. The chief decides that the job succeeded (else the workers).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from phalanx import constants
from phalanx.api.slots import Slot, service_name, slot_hostname, slots, worker
from phalanx.api.tensorflow import TENSORFLOW_ROLE_RULES, TENSORFLOW_RULES
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.frameworks.base import FrameworkPlugin


def uses_tensorflow(spec: TrainingJobSpec) -> bool:
    return spec.framework == Framework.TENSORFLOW


def task_address(job: TrainingJob, slot: Slot, port: int) -> str:
    """``<pod hostname>.<headless service>.<namespace>.svc:<port>`` of a worker or role pod."""
    name = job.metadata.name
    return f"{slot_hostname(name, slot)}.{service_name(name)}.{job.metadata.namespace}.svc:{port}"


def worker_address(job: TrainingJob, rank: int, port: int) -> str:
    return task_address(job, worker(rank), port)


def tf_cluster(job: TrainingJob, address: Callable[[Slot], str]) -> dict[str, list[str]]:
    """The cluster spec: every task type (chief, worker, ps) and its addresses in index order.
    The evaluator is left out, as TensorFlow expects: it only reads checkpoints."""
    cluster: dict[str, list[str]] = {}
    for slot in slots(job.spec):
        if slot.role != constants.TF_TASK_EVALUATOR:
            cluster.setdefault(slot.role, []).append(address(slot))
    return cluster


def tf_config(cluster: dict[str, list[str]], index: int, task_type: str = constants.TF_TASK_WORKER) -> dict[str, Any]:
    """The TF_CONFIG of task ``task_type``/``index`` of ``cluster`` (task type → addresses)."""
    size = len(cluster.get(task_type, [])) if task_type != constants.TF_TASK_EVALUATOR else 1
    if not 0 <= index < size:
        raise ValueError(f"{task_type} index {index} outside a cluster of {size} {task_type} tasks")
    return {"cluster": {k: list(v) for k, v in cluster.items()}, "task": {"type": task_type, "index": index}}


def tf_config_json(cluster: dict[str, list[str]], index: int, task_type: str = constants.TF_TASK_WORKER) -> str:
    return json.dumps(tf_config(cluster, index, task_type), separators=(",", ":"))


def tf_env(job: TrainingJob, slot: Slot | int, port: int) -> list[dict[str, str]]:
    """The pod's TF_CONFIG env entry (none unless the job is ``framework: tensorflow``)."""
    if not uses_tensorflow(job.spec):
        return []
    slot = worker(slot) if isinstance(slot, int) else slot
    cluster = tf_cluster(job, lambda s: task_address(job, s, port))
    return [{"name": constants.ENV_TF_CONFIG, "value": tf_config_json(cluster, slot.index, slot.role)}]


class TensorFlow(FrameworkPlugin):
    framework = Framework.TENSORFLOW
    rules = TENSORFLOW_RULES + TENSORFLOW_ROLE_RULES

    def slot_env(self, job: TrainingJob, slot: Slot, master_port: int) -> list[dict[str, Any]]:
        return tf_env(job, slot, master_port)


PLUGIN = TensorFlow()
