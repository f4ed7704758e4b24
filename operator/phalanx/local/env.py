"""What each local process of ``phalanx local`` gets: the environment and command its pod would get
from the operator (``phalanx.render.pod``), moved onto this machine. One process per slot of the
gang (``phalanx.api.slots``): the workers (node-ranks) first, then each of ``spec.roles``'
replicas, each with its role's command/args and env.

Local differences from the pods: the rendezvous host is 127.0.0.1, config and checkpoints are local
paths, no metrics port (the processes share this host), a progress port only on worker 0 when
asked for, each process's termination message a file of its own in the run's directory, a log
collector (spec.progress) around worker 0's command only (the pods' other workers run theirs
unread), and a tensorflow job's TF_CONFIG lists 127.0.0.1:<a free port per task> instead of the
pods' DNS names (``PHALANX_SUBDOMAIN`` is kept as rendered: the pods' names do not resolve here).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from dataclasses import dataclass

from phalanx.api.progress import collected, wraps_command
from phalanx.api.slots import Slot, role_of, slot_pod_name, slots, worker
from phalanx.api.slots import slot_command as slots_command
from phalanx.api.types import ObjectMeta, TrainingJob, TrainingJobSpec
from phalanx.constants import (
    DEEPSPEED_CONFIG_FILE,
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_URI,
    ENV_CONFIG_PATH,
    ENV_DEEPSPEED_CONFIG,
    ENV_HOROVOD_RENDEZVOUS_ADDR,
    ENV_HOROVOD_RENDEZVOUS_PORT,
    ENV_MASTER_ADDR,
    ENV_METRICS_PORT,
    ENV_PARENT_PID,
    ENV_PET_MASTER_ADDR,
    ENV_PET_NNODES,
    ENV_PET_NODE_RANK,
    ENV_PET_RDZV_ENDPOINT,
    ENV_PROGRESS_PORT,
    ENV_STOP_GRACE_SECONDS,
    ENV_TERMINATION_LOG,
    ENV_TF_CONFIG,
    ENV_WORLD_SIZE,
)
from phalanx.frameworks.tensorflow import tf_cluster, tf_config_json, uses_tensorflow
from phalanx.render.pod import rendezvous_env
from phalanx_common.contract import (
    ENV_GROUP_RANK,
    ENV_LOCAL_RANK,
    ENV_LOCAL_WORLD_SIZE,
    ENV_OMP_NUM_THREADS,
    ENV_RANK,
    ENV_RESULT_FILE,
    SLURM_NTASKS,
)
from phalanx_common.net import free_ports
from phalanx_common.storage import is_object_uri

# Never inherited from the caller's environment: they would mislead the launcher or torchrun.
SCRUBBED_ENV = (ENV_RANK, ENV_WORLD_SIZE, ENV_LOCAL_RANK, ENV_LOCAL_WORLD_SIZE, ENV_GROUP_RANK,
                SLURM_NTASKS, ENV_PET_NNODES, ENV_PET_NODE_RANK)


@dataclass(frozen=True)
class LocalJob:
    """The job ``phalanx local`` runs: its spec and identity, as its pods would have them."""

    spec: TrainingJobSpec
    name: str = "job"
    namespace: str = "default"

    def job(self) -> TrainingJob:
        return TrainingJob(metadata=ObjectMeta(name=self.name, namespace=self.namespace), spec=self.spec)


def trampoline(cmd: list[str]) -> list[str]:
    """``cmd`` run through the runtime's parent-death trampoline (``python -m
    phalanx_runtime.lifetime``): it gets SIGTERM when ``phalanx local`` ($PHALANX_PARENT_PID) dies."""
    return [sys.executable, "-m", "phalanx_runtime.lifetime", "--", *cmd]


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_refs(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined references replaced, others kept, ``$$`` → ``$``."""
    return _VAR_REF.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def slot_label(slot: Slot) -> str:
    """How messages name a process: ``node 1`` (a worker's node-rank), ``ps 0``."""
    return f"node {slot.index}" if slot.is_worker else f"{slot.role} {slot.index}"


def _field_ref(cfg: LocalJob, slot: Slot, path: str) -> str | None:
    return {"metadata.name": slot_pod_name(cfg.name, slot, 0), "metadata.namespace": cfg.namespace,
            "spec.nodeName": socket.gethostname()}.get(path)


def local_tf_cluster(cfg: LocalJob, ports: list[int] | None = None) -> dict[str, list[str]]:
    """The job's TF cluster spec (every task type; frameworks.tensorflow.tf_cluster) with each task on
    a distinct free port of 127.0.0.1 (``ports``, one per slot; default: chosen now), as each pod
    listens on its own address."""
    gang = slots(cfg.spec)
    address = {s: f"127.0.0.1:{p}" for s, p in zip(gang, ports or free_ports(len(gang)), strict=True)}
    return tf_cluster(cfg.job(), address.__getitem__)


def _user_env(cfg: LocalJob, slot: Slot, env: dict[str, str]) -> None:
    """``spec.env``, then the slot's role's env (as the pod lists them), ``$(VAR)`` expanded."""
    role = role_of(cfg.spec, slot.role)
    for item in [*cfg.spec.env, *(role.env if role is not None else [])]:
        e = item.to_kube() if hasattr(item, "to_kube") else dict(item)
        if e.get("value") is not None:
            env[e["name"]] = expand_refs(str(e["value"]), env)
        elif "valueFrom" in e:
            print(f"phalanx local: env {e['name']}: valueFrom is not available locally; not set", file=sys.stderr)
        else:
            env[e["name"]] = ""


def pod_env(cfg: LocalJob, node: int | Slot, *, master_port: int, config_path: str, checkpoint_dir: str,
            progress_port: int | None = None, tf_cluster: dict[str, list[str]] | None = None,
            horovod_port: int | None = None) -> dict[str, str]:
    """The container env of slot ``node`` (a node-rank, or a role's pod) as the operator renders it
    (attempt 0), then ``spec.env`` and the role's env, moved onto this machine (module docstring).
    A tensorflow job's TF_CONFIG lists ``tf_cluster`` (task type → local addresses)."""
    slot = worker(node) if isinstance(node, int) else node
    env: dict[str, str] = {}
    for e in rendezvous_env(cfg.job(), slot, 0, master_port):
        value = e.get("value", _field_ref(cfg, slot, e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")))
        if value is not None:
            env[e["name"]] = str(value)
    env.update({ENV_MASTER_ADDR: "127.0.0.1", ENV_CONFIG_PATH: config_path, ENV_CHECKPOINT_DIR: checkpoint_dir})
    if slot.is_worker:  # role pods are not ranks of the torch world: no PET_* to move
        env.update({ENV_PET_MASTER_ADDR: "127.0.0.1", ENV_PET_RDZV_ENDPOINT: f"127.0.0.1:{master_port}"})
    if ENV_DEEPSPEED_CONFIG in env:  # framework deepspeed: next to config.json, as in the pod
        env[ENV_DEEPSPEED_CONFIG] = os.path.join(os.path.dirname(config_path), DEEPSPEED_CONFIG_FILE)
    if ENV_TF_CONFIG in env and tf_cluster:  # framework tensorflow: the same cluster, on this host
        env[ENV_TF_CONFIG] = tf_config_json(tf_cluster, slot.index, slot.role)
    if ENV_HOROVOD_RENDEZVOUS_ADDR in env and horovod_port:  # framework horovod: worker 0's server, here
        env.update({ENV_HOROVOD_RENDEZVOUS_ADDR: "127.0.0.1", ENV_HOROVOD_RENDEZVOUS_PORT: str(horovod_port)})
    env.pop(ENV_METRICS_PORT, None)
    env.pop(ENV_PROGRESS_PORT, None)
    if slot == worker(0) and progress_port:
        env[ENV_PROGRESS_PORT] = str(progress_port)
    _user_env(cfg, slot, env)
    return env


def slot_command(cfg: LocalJob, slot: Slot) -> list[str]:
    """The user's command and args of ``slot``'s pod, as the pod gets them (api.slots); empty for
    built-in jobs."""
    command, args = slots_command(cfg.spec, slot)
    return [*command, *(args or [])] if command else []


def node_argv(cfg: LocalJob, env: dict[str, str], config_path: str, slot: Slot | None = None) -> list[str]:
    """The pod's command: the user's (command jobs; with the parent-death trampoline; worker 0's
    under spec.progress's log collector) or the launcher."""
    slot = slot or worker(0)
    user = [expand_refs(a, env) for a in slot_command(cfg, slot)]
    if not user:
        return [sys.executable, "-m", "phalanx_runtime.launch", "--config", config_path]
    if slot == worker(0) and wraps_command(cfg.spec.progress):
        user = collected(user, python=sys.executable)
    return trampoline(user)


def termination_log(d: str, slot: Slot) -> str:
    """Where ``slot``'s process writes its termination message (final progress, or a failure
    report) in the run's directory ``d``: a file per process, as each pod has its own."""
    return os.path.join(d, f"termination-log.{slot.role}-{slot.index}")


def slot_envs(cfg: LocalJob, d: str, *, env, checkpoint_dir, progress_port,
              grace: float) -> list[tuple[Slot, dict[str, str]]]:
    """Every slot of the gang with its process's whole environment: ours (less SCRUBBED_ENV), the
    caller's ``env``, then the pod's (``pod_env``)."""
    spec = cfg.spec
    gang = slots(spec)
    processes = spec.nodes * spec.procs_per_node + len(gang) - spec.nodes  # role pods: one process each
    base = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    base[ENV_OMP_NUM_THREADS] = str(max(1, (os.cpu_count() or 1) // processes))
    base.update(env or {})
    base.update({ENV_PARENT_PID: str(os.getpid()), ENV_STOP_GRACE_SECONDS: f"{grace:g}",
                 ENV_RESULT_FILE: os.path.join(d, "result.json")})
    tf = uses_tensorflow(spec)
    ports = free_ports(2 + (len(gang) if tf else 0))  # chosen together: none repeats
    master_port, horovod_port = ports[0], ports[1]
    cluster = local_tf_cluster(cfg, ports[2:]) if tf else None
    # --checkpoint-dir s3://…: the checkpoints in the bucket (this machine's AWS_* / GOOGLE_* env reaches
    # it), the checkpoint dir a local one, as a pod with checkpoint.storage has them
    uri = {ENV_CHECKPOINT_URI: str(checkpoint_dir).rstrip("/")} if is_object_uri(str(checkpoint_dir or "")) else {}
    ckpt = os.path.abspath(checkpoint_dir) if checkpoint_dir and not uri else os.path.join(d, "checkpoints")
    return [(slot, {**base, **pod_env(cfg, slot, master_port=master_port, config_path=os.path.join(d, "config.json"),
                                      checkpoint_dir=ckpt, progress_port=progress_port, tf_cluster=cluster,
                                      horovod_port=horovod_port),
                    **uri, ENV_TERMINATION_LOG: termination_log(d, slot)})
            for slot in gang]
