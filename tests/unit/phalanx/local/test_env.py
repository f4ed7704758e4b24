"""`phalanx local`'s processes (pure parts): one process per slot of the gang, each with its pod's env
(role env, no torch rank env for role pods, TF_CONFIG of every task type on 127.0.0.1) and its
role's command/args."""

from __future__ import annotations

import json

from phalanx import constants
from phalanx.api.slots import Slot, slots, worker
from phalanx.api.types import TrainingJob
from phalanx.local.env import (
    LocalJob,
    local_tf_cluster,
    node_argv,
    pod_env,
    slot_command,
    slot_envs,
)
from phalanx.render.pod import rendezvous_env


def cfg(**spec) -> LocalJob:
    s = {"image": "x", "nodes": 2, "command": ["python", "train.py"], "args": ["--spec-arg"], **spec}
    j = TrainingJob.model_validate({"metadata": {"name": "j", "namespace": "ml"}, "spec": s})
    return LocalJob(spec=j.spec, name=j.metadata.name, namespace=j.metadata.namespace)


TF_ROLES = [{"name": "chief", "args": ["--coordinate"], "env": [{"name": "STEPS", "value": "$(PHALANX_ROLE)-9"}]},
            {"name": "ps", "replicas": 2, "command": ["python", "ps.py"]},
            {"name": "evaluator"}]


def env_of(c: LocalJob, slot: Slot, **kw) -> dict[str, str]:
    return pod_env(c, slot, master_port=1234, config_path="/tmp/x/config.json", checkpoint_dir="/tmp/x", **kw)


# --- when the run ends ------------------------------------------------------------------------







# --- each process's command and env -----------------------------------------------------------

def test_each_slot_runs_its_roles_command_and_args():
    c = cfg(framework="tensorflow", roles=TF_ROLES)
    assert slot_command(c, worker(1)) == ["python", "train.py", "--spec-arg"]
    assert slot_command(c, Slot("chief", 0)) == ["python", "train.py", "--coordinate"]  # the role's args
    assert slot_command(c, Slot("ps", 1)) == ["python", "ps.py"]  # the role's command, without spec.args
    assert slot_command(c, Slot("evaluator", 0)) == ["python", "train.py", "--spec-arg"]
    argv = node_argv(c, {"X": "1"}, "/tmp/x/config.json", Slot("ps", 0))
    assert argv[1:4] == ["-m", "phalanx_runtime.lifetime", "--"] and argv[4:] == ["python", "ps.py"]
    builtin = LocalJob(spec=TrainingJob.model_validate(
        {"metadata": {"name": "b"}, "spec": {"image": "x", "model": {"preset": "tiny"}}}).spec, name="b")
    assert node_argv(builtin, {}, "/c.json")[1:3] == ["-m", "phalanx_runtime.launch"]


def test_role_pods_get_their_pods_env_on_this_host():
    c = cfg(framework="tensorflow", roles=TF_ROLES, env=[{"name": "SHARED", "value": "$(PHALANX_ROLE_INDEX)"}])
    job = TrainingJob.model_validate({"metadata": {"name": "j", "namespace": "ml"}, "spec": c.spec.model_dump(by_alias=True)})
    cluster = local_tf_cluster(c)
    chief = env_of(c, Slot("chief", 0), tf_cluster=cluster)
    rendered = {e["name"]: e.get("value") for e in rendezvous_env(job, Slot("chief", 0), 0, 1234)}
    for name in (constants.ENV_ROLE, constants.ENV_ROLE_INDEX, constants.ENV_ROLE_REPLICAS, constants.ENV_ROLES, constants.ENV_JOB_NAME):
        assert chief[name] == rendered[name], name
    assert chief[constants.ENV_ROLES] == "worker=2,chief=1,ps=2,evaluator=1"
    assert constants.ENV_NODE_RANK not in chief and constants.ENV_PET_RDZV_ENDPOINT not in chief  # not a torch rank
    assert chief[constants.ENV_MASTER_ADDR] == "127.0.0.1" and chief[constants.ENV_POD_NAME] == "j-chief-0-0"
    assert chief["STEPS"] == "chief-9" and chief["SHARED"] == "0"  # spec.env, then the role's, $(VAR) expanded
    assert constants.ENV_PROGRESS_PORT not in chief and constants.ENV_METRICS_PORT not in chief
    assert json.loads(chief[constants.ENV_TF_CONFIG]) == {"cluster": cluster, "task": {"type": "chief", "index": 0}}
    w1 = env_of(c, worker(1), tf_cluster=cluster, progress_port=7)
    assert w1[constants.ENV_NODE_RANK] == "1" and w1[constants.ENV_PET_RDZV_ENDPOINT] == "127.0.0.1:1234" and "STEPS" not in w1
    assert constants.ENV_PROGRESS_PORT not in w1 and env_of(c, worker(0), progress_port=7)[constants.ENV_PROGRESS_PORT] == "7"
    assert json.loads(env_of(c, Slot("ps", 1), tf_cluster=cluster)[constants.ENV_TF_CONFIG])["task"] == {"type": "ps", "index": 1}
    ev = json.loads(env_of(c, Slot("evaluator", 0), tf_cluster=cluster)[constants.ENV_TF_CONFIG])
    assert ev == {"cluster": cluster, "task": {"type": "evaluator", "index": 0}}


def test_local_tf_cluster_every_task_on_its_own_local_port():
    c = cfg(framework="tensorflow", roles=TF_ROLES)
    cluster = local_tf_cluster(c)
    assert {k: len(v) for k, v in cluster.items()} == {"worker": 2, "chief": 1, "ps": 2}  # no evaluator
    addresses = [a for v in cluster.values() for a in v]
    assert all(a.startswith("127.0.0.1:") for a in addresses) and len(set(addresses)) == 5


def test_slot_envs_one_env_per_pod_with_distinct_local_ports(tmp_path):
    c = cfg(framework="tensorflow", roles=TF_ROLES)
    gang = slot_envs(c, str(tmp_path), env={"EXTRA": "1"}, checkpoint_dir=None, progress_port=None, grace=5)
    assert [s for s, _ in gang] == slots(c.spec)
    envs = [e for _, e in gang]
    assert all(e["EXTRA"] == "1" and e[constants.ENV_MASTER_PORT] == envs[0][constants.ENV_MASTER_PORT] for e in envs)
    cluster = json.loads(envs[0][constants.ENV_TF_CONFIG])["cluster"]
    ports = {a.rsplit(":", 1)[1] for v in cluster.values() for a in v}
    assert len(ports) == 5 and envs[0][constants.ENV_MASTER_PORT] not in ports  # chosen together: none repeats
    assert all(json.loads(e[constants.ENV_TF_CONFIG])["cluster"] == cluster for e in envs)
    assert [e.get(constants.ENV_ROLE) for e in envs] == ["worker", "worker", "chief", "ps", "ps", "evaluator"]


# --- spec.progress: the collector around worker 0's command, a termination log per process --------

REGEX = {"collector": "regex", "patterns": ["step (?P<step>\\d+)"]}


def test_a_log_collector_wraps_worker_0s_command_only():
    import sys

    c = cfg(progress={"collector": "huggingface"}, roles=[{"name": "ps"}])
    zero, one, ps = (node_argv(c, {}, "/c.json", slot) for slot in (worker(0), worker(1), Slot("ps", 0)))
    assert zero[:4] == [sys.executable, "-m", "phalanx_runtime.lifetime", "--"]
    assert zero[4:] == [sys.executable, "-m", constants.COLLECT_MODULE, "--", "python", "train.py", "--spec-arg"]
    assert one[4:] == ps[4:] == ["python", "train.py", "--spec-arg"]
    for progress in (None, {"collector": "client"}):  # the script reports itself, or not at all
        assert node_argv(cfg(progress=progress), {}, "/c.json")[4:] == ["python", "train.py", "--spec-arg"]


def test_every_worker_gets_the_progress_env():
    c = cfg(progress=REGEX, roles=[{"name": "ps"}])
    for rank in (0, 1):
        env = env_of(c, worker(rank))
        assert env[constants.ENV_PROGRESS_COLLECTOR] == "regex"
        assert json.loads(env[constants.ENV_PROGRESS_PATTERNS]) == REGEX["patterns"]
    assert constants.ENV_PROGRESS_COLLECTOR not in env_of(c, Slot("ps", 0))
    assert constants.ENV_PROGRESS_COLLECTOR not in env_of(cfg(), worker(0))


def test_each_process_writes_its_own_termination_log(tmp_path):
    c = cfg(roles=[{"name": "ps"}])
    gang = slot_envs(c, str(tmp_path), env={constants.ENV_TERMINATION_LOG: "/dev/termination-log"},
                     checkpoint_dir=None, progress_port=None, grace=1.0)
    logs = [env[constants.ENV_TERMINATION_LOG] for _, env in gang]
    assert logs == [str(tmp_path / "termination-log.worker-0"), str(tmp_path / "termination-log.worker-1"),
                    str(tmp_path / "termination-log.ps-0")]
