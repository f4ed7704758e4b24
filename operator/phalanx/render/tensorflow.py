"""TF_CONFIG of a ``framework: tensorflow`` command job (pure: job in, env out).

Every pod runs one TensorFlow worker (``procsPerNode`` 1) and gets the whole cluster spec and its
own task in ``$TF_CONFIG``, as ``tf.distribute.MultiWorkerMirroredStrategy`` reads it::

    {"cluster": {"worker": ["<job>-node-0.<job>.<ns>.svc:<port>", ...]},
     "task": {"type": "worker", "index": <node rank>}}

The addresses are the pods' stable DNS names through the job's headless Service (the names the
torch rendezvous uses for MASTER_ADDR), in node-rank order, on the rendezvous port (the port the
pod declares, the Service publishes and the job's NetworkPolicy lets the gang reach; under
hostNetwork, the job's host port). Worker 0 is MWMS's chief (checkpoints, summaries). Only the
worker role is rendered: ParameterServerStrategy needs chief/ps roles (heterogeneous gangs).
``phalanx local`` renders the same with 127.0.0.1 ports (:func:`tf_config` on local addresses).
What does not fit one worker per pod is refused by the spec's rules (api/types.py
TENSORFLOW_RULES) before anything is rendered.
"""

from __future__ import annotations

import json
from typing import Any

from phalanx import constants as C
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.render.names import hostname, service_name


def uses_tensorflow(spec: TrainingJobSpec) -> bool:
    return spec.framework == Framework.TENSORFLOW


def worker_address(job: TrainingJob, rank: int, port: int) -> str:
    """``<pod hostname>.<headless service>.<namespace>.svc:<port>`` of node-rank ``rank``."""
    name = job.metadata.name
    return f"{hostname(name, rank)}.{service_name(name)}.{job.metadata.namespace}.svc:{port}"


def tf_config(workers: list[str], index: int) -> dict[str, Any]:
    """The TF_CONFIG of worker ``index`` of a cluster of ``workers`` (host:port, in rank order)."""
    if not 0 <= index < len(workers):
        raise ValueError(f"worker index {index} outside a cluster of {len(workers)} workers")
    return {"cluster": {C.TF_TASK_WORKER: list(workers)}, "task": {"type": C.TF_TASK_WORKER, "index": index}}


def tf_config_json(workers: list[str], index: int) -> str:
    return json.dumps(tf_config(workers, index), separators=(",", ":"))


def tf_env(job: TrainingJob, rank: int, port: int) -> list[dict[str, str]]:
    """The pod's TF_CONFIG env entry (none unless the job is ``framework: tensorflow``)."""
    if not uses_tensorflow(job.spec):
        return []
    workers = [worker_address(job, r, port) for r in range(job.spec.nodes)]
    return [{"name": C.ENV_TF_CONFIG, "value": tf_config_json(workers, rank)}]
