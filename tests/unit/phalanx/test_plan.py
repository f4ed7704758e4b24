import json
from pathlib import Path

import yaml

from phalanx.plan import EXIT_INPUT_ERROR, EXIT_PLACED, EXIT_UNSCHEDULABLE, run_plan

ROOT = Path(__file__).resolve().parents[3]
NODES = str(ROOT / "examples" / "nodes-fattree-16.yaml")

JOB = """
apiVersion: phalanx.dev/v1alpha1
kind: TrainingJob
metadata: {name: llama-8b, namespace: team-a}
spec:
  image: x
  nodes: 4
  procsPerNode: 8
  resources: {gpus: 8}
  parallelism: {zero: 2}
  model: {preset: 8b}
"""


def test_text_output():
    code, text = run_plan(JOB, NODES)
    assert code == EXIT_PLACED, text
    lines = text.splitlines()
    assert lines[0] == "team-a/llama-8b: 4 nodes with 8 free nvidia.com/gpu placed"
    assert "     0  gpu-b0-s0-0  block=block-0/subblock=block-0-sub-0/hostname=gpu-b0-s0-0" in lines
    assert "span: block 1, subblock 1, hostname 4" in lines
    assert "lower bound span: block 1, subblock 1, hostname 4" in lines
    assert any(x.startswith("  ring:") and "lower bound" in x for x in lines)
    assert any(x.startswith("ZeRO-2 model state per GPU:") for x in lines)


def test_json_output_and_levels_override():
    code, text = run_plan(JOB, NODES, levels="phalanx.dev/topology-block,kubernetes.io/hostname", json_out=True)
    assert code == EXIT_PLACED
    out = json.loads(text)
    assert out["span"] == {"block": 1, "hostname": 4}
    assert [p["rank"] for p in out["placement"]] == [0, 1, 2, 3]
    assert out["allreduce"]["ranks"] == 32 and out["params"] == 8030261248
    assert out["allreduce"]["ringSeconds"] >= out["lowerBound"]["ringSeconds"]


def test_unschedulable_message_and_pods_reduce_capacity(tmp_path):
    job16 = JOB.replace("nodes: 4", "nodes: 14")
    code, text = run_plan(job16, NODES)
    assert code == EXIT_UNSCHEDULABLE
    assert text.splitlines() == [
        "team-a/llama-8b: unschedulable: needs 14 nodes with 8 free nvidia.com/gpu; 13 fit "
        "(3 excluded: 1 not ready, 1 cordoned, 1 tainted)",
        "topology: phalanx (block, subblock, hostname): 16 of 16 accelerator nodes labelled",
        "toleration: nvidia.com/gpu Exists NoSchedule ← requests nvidia.com/gpu (as ExtendedResourceToleration adds)"]
    pods = {"kind": "List", "items": [
        {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "x"},
         "spec": {"nodeName": f"gpu-b0-s0-{i}", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
         "status": {"phase": "Running"}} for i in range(4)]}
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump(pods))
    code, text = run_plan(JOB, NODES, str(f), json_out=True)
    out = json.loads(text)
    assert code == EXIT_PLACED and not any(p["node"].startswith("gpu-b0-s0") for p in out["placement"])
    code, text = run_plan(JOB.replace("nodes: 4", "nodes: 10"), NODES, str(f), json_out=True)
    assert code == EXIT_UNSCHEDULABLE and json.loads(text)["excluded"]["too little nvidia.com/gpu"] == 4


def test_required_topology_message():
    job = JOB.replace("model: {preset: 8b}", "model: {preset: 8b}\n  scheduling: {topology: {required: subblock}}")
    code, text = run_plan(job.replace("nodes: 4", "nodes: 5"), NODES)
    assert code == EXIT_UNSCHEDULABLE
    assert text.splitlines()[0].endswith("needs 5 nodes with 8 free nvidia.com/gpu under one subblock; the largest has 4")


def test_entrypoint_job_has_no_prediction():
    job = JOB.replace("model: {preset: 8b}", "command: [python, train.py]")
    code, text = run_plan(job, NODES)
    assert code == EXIT_PLACED and "no prediction" in text


def test_input_errors():
    assert run_plan("kind: TrainingJob\nmetadata: {name: x}\nspec: {nodes: 0}\n", NODES)[0] == EXIT_INPUT_ERROR
    assert run_plan(JOB, "kind: List\nitems: []\n") == (EXIT_INPUT_ERROR, "error: no Node objects in the nodes file")
    multi = "\n---\n".join(yaml.safe_dump(n) for n in yaml.safe_load(Path(NODES).read_text())["items"][:4])
    assert run_plan(JOB, multi)[0] == EXIT_PLACED


ROLES_JOB = """
apiVersion: phalanx.dev/v1alpha1
kind: TrainingJob
metadata: {name: rec, namespace: team-a}
spec:
  image: x
  nodes: 2
  resources: {gpus: 8}
  command: [python, train.py]
  roles: [{name: ps, replicas: 2, resources: {cpu: "4"}}]
"""


def test_roles_are_planned_and_reported_with_the_workers():
    code, text = run_plan(ROLES_JOB, NODES)
    assert code == EXIT_PLACED, text
    assert any(line.startswith("role ps: 0 ") and ", 1 " in line for line in text.splitlines())
    out = json.loads(run_plan(ROLES_JOB, NODES, json_out=True)[1])
    assert len(out["roles"]["ps"]) == 2 and len(out["placement"]) == 2
    too_many = ROLES_JOB.replace("replicas: 2", "replicas: 200")
    code, text = run_plan(too_many, NODES)
    assert code == EXIT_UNSCHEDULABLE and "role ps: needs 200 nodes" in text


def test_quarantined_nodes_are_left_out_and_listed(tmp_path):
    nq = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "phalanx.dev/v1alpha1", "kind": "NodeQuarantine", "metadata": {"name": "gpu-b0-s0-0"},
         "spec": {"node": "gpu-b0-s0-0", "reason": "Condition", "expiresAt": "2999-01-01T00:00:00Z"}},
        {"apiVersion": "phalanx.dev/v1alpha1", "kind": "NodeQuarantine", "metadata": {"name": "gpu-b0-s0-1"},
         "spec": {"node": "gpu-b0-s0-1", "reason": "JobEvidence", "expiresAt": "2000-01-01T00:00:00Z"}}]}  # expired
    f = tmp_path / "nq.yaml"
    f.write_text(yaml.safe_dump(nq))
    code, text = run_plan(JOB, NODES, quarantine_yaml=str(f))
    assert code == EXIT_PLACED, text
    assert "gpu-b0-s0-0  " not in text and "gpu-b0-s0-1  " in text
    assert "quarantined: gpu-b0-s0-0 (Condition)" in text.splitlines()
    out = json.loads(run_plan(JOB, NODES, quarantine_yaml=str(f), json_out=True)[1])
    assert out["quarantined"] == [{"node": "gpu-b0-s0-0", "reason": "Condition", "expiresAt": "2999-01-01T00:00:00+00:00"}]
    assert "gpu-b0-s0-0" not in [p["node"] for p in out["placement"]]
    code, text = run_plan(JOB.replace("nodes: 4", "nodes: 13"), NODES, quarantine_yaml=str(f))
    assert code == EXIT_UNSCHEDULABLE and "1 quarantined" in text
