"""Clusters shaped as the clouds ship their GPU nodes: README's first job and a multi-node gang run
with the chart's default config and no edits to the job.

One control plane of its own (the session cluster's nodes carry our own labels), an operator with
exactly the config the chart installs (tests/example_files.chart_operator_config), and in turn
kwok node pools shaped like GKE A3, EKS p5 and a GPU-Operator GB200 NVL72 cluster
(tests/provider_nodes.py: their documented labels, taints and allocatable, names in no topology
order), then AKS (no topology labels, its sku=gpu taint). The API server runs without the
ExtendedResourceToleration admission plugin, so the GPU taints are tolerated only because the
operator renders the tolerations the plugin would add. For each pool: the operator detects the
topology from the nodes (on the node changes, its metric), the gang sits in one domain of the
provider's closest level (subblock, layer-3, NVLink clique), and `phalanx plan` on
`kubectl get nodes -o yaml` of the same cluster gives the same verdict.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from localcluster import default_bin_dir
from phalanx.plan import EXIT_PLACED, EXIT_UNSCHEDULABLE, run_plan
from tests import provider_nodes
from tests.example_files import chart_operator_config
from tests.integration.conftest import require_binaries, started_cluster
from tests.integration.harness import Jobs, OperatorProcess, install_crd, job_manifest, wait_for

ROOT = Path(__file__).resolve().parents[2]
NOT_READY = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def readme_first_job() -> dict:
    """The TrainingJob of README's "Your first job" section, as a user copies it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Your first job"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    job = yaml.safe_load(block)
    assert job["kind"] == "TrainingJob"
    return job


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A control plane with no nodes (overrides the session cluster for this module)."""
    require_binaries(default_bin_dir(), "no control plane for the provider-shaped clusters")
    with started_cluster(tmp_path_factory.mktemp("provider-cluster"), "local-provider") as handle:
        yield handle


@pytest.fixture(scope="module")
def operator(cluster, tmp_path_factory):
    install_crd(cluster)
    op = OperatorProcess(cluster.kubeconfig, tmp_path_factory.mktemp("provider-operator"),
                         config=chart_operator_config()).start()
    yield op
    op.stop()


@pytest.fixture
def jobs(api, namespace, operator):
    return Jobs(api, namespace)


def create_pool(cluster, api, nodes: list[dict]) -> list[str]:
    """The pool's nodes (every other pool's deleted first), Ready and without the not-ready taint."""
    core = client.CoreV1Api(api)
    for old in core.list_node().items:
        core.delete_node(old.metadata.name)
    wait_for(lambda: not core.list_node().items, 60, "previous pool gone")
    for node in nodes:
        core.create_node(node)
    names = {n["metadata"]["name"] for n in nodes}

    def ready() -> bool:
        seen = {n.metadata.name: n for n in core.list_node().items}
        return all(name in seen and any(c.type == "Ready" and c.status == "True" for c in seen[name].status.conditions or [])
                   and not any(t.key in NOT_READY for t in seen[name].spec.taints or []) for name in names)

    wait_for(ready, 120, "pool nodes Ready")
    return sorted(names)


def detected(operator, preset: str, timeout: float = 30) -> str:
    """The operator's phalanx_topology_preset once it reports ``preset``; its levels label."""
    def current():
        for line in operator.metrics().splitlines():
            found = re.match(r'phalanx_topology_preset\{levels="([^"]*)",preset="([^"]*)"\} 1\.0', line)
            if found and found.group(2) == preset:
                return found.group(1)
        return None

    return wait_for(current, timeout, f"operator to detect topology {preset}")


def nodes_yaml(cluster) -> str:
    return cluster.kubectl("get", "nodes", "-o", "yaml").stdout


def running_on(jobs, name: str, count: int) -> list[str]:
    def placed():
        pods = jobs.pods(name, 0)
        return (len(pods) == count and all(p.spec.node_name and p.status.phase == "Running" for p in pods)
                and sorted(p.spec.node_name for p in pods))
    try:
        return wait_for(placed, 90, f"{name}: {count} pods Running")
    except AssertionError as e:
        status = jobs.status(name)
        pods = [(p.metadata.name, p.spec.node_name, p.status.phase, p.status.conditions, p.spec.tolerations)
                for p in jobs.pods(name)]
        raise AssertionError(" ".join(f"{e}; job status: {status.get('phase')} {status.get('conditions')}; pods: {pods}".split())) from None


def delete_and_wait(jobs, name: str) -> None:
    jobs.delete(name)
    wait_for(lambda: not jobs.pods(name), 60, f"{name}: pods gone")


def labels_of(api, names) -> dict[str, dict[str, str]]:
    core = client.CoreV1Api(api)
    return {n: core.read_node(n).metadata.labels for n in names}


def first_job_and_gang(cluster, api, jobs, pool, gang: int, procs: int, gpus: int, level_label: str):
    """README's first job runs (tainted GPU nodes tolerated as the cluster would); then a gang with
    no topology request lands in one domain of ``level_label``, where the offline plan puts it too."""
    first = readme_first_job()
    jobs.create(first)
    [node] = running_on(jobs, first["metadata"]["name"], 1)
    assert node in pool
    pod = jobs.pods(first["metadata"]["name"], 0)[0]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in [
        {k: v for k, v in t.to_dict().items() if v is not None} for t in pod.spec.tolerations]
    delete_and_wait(jobs, first["metadata"]["name"])

    job = job_manifest("gang", nodes=gang, procs=procs, gpus=gpus)
    jobs.create(job)
    placed = running_on(jobs, "gang", gang)
    domains = {labels[level_label] for labels in labels_of(api, placed).values()}
    assert len(domains) == 1, f"gang spans {len(domains)} {level_label} domains: {placed}"

    code, text = run_plan({**job, "metadata": {"name": "gang", "namespace": jobs.ns}}, nodes_yaml(cluster),
                          config=_chart_config(), json_out=True)
    assert code == EXIT_PLACED, text
    planned = [row["node"] for row in yaml.safe_load(text)["placement"]]
    assert {labels_of(api, planned)[n][level_label] for n in planned} == domains
    delete_and_wait(jobs, "gang")
    return placed


def _chart_config():
    from phalanx.api.config import OperatorConfig

    return OperatorConfig.model_validate(chart_operator_config())


def test_gke_a3(cluster, api, jobs, operator):
    pool = create_pool(cluster, api, provider_nodes.gke_a3_nodes(blocks=2, subblocks_per_block=2, hosts_per_subblock=4,
                                                                kwok=True))
    assert detected(operator, "gke") == "block,subblock,hostname"
    first_job_and_gang(cluster, api, jobs, pool, gang=4, procs=8, gpus=8,
                       level_label="cloud.google.com/gce-topology-subblock")


def test_eks_p5(cluster, api, jobs, operator):
    pool = create_pool(cluster, api, provider_nodes.eks_p5_nodes(layer1=1, layer2_per_l1=2, layer3_per_l2=2,
                                                                hosts_per_l3=4, kwok=True))
    assert detected(operator, "aws") == "layer-1,layer-2,layer-3,hostname"
    first_job_and_gang(cluster, api, jobs, pool, gang=4, procs=8, gpus=8,
                       level_label="topology.k8s.aws/network-node-layer-3")


def test_gpu_operator_gb200(cluster, api, jobs, operator):
    create_pool(cluster, api, provider_nodes.gb200_nodes(racks=2, trays_per_rack=18, kwok=True))
    assert detected(operator, "nvlink") == "clique,hostname"
    # README's first job asks for 8 GPUs on one node: a GB200 tray has 4, so it runs as 4 × 1 there
    # only with an edit; the gang of 18 trays (a whole NVL72 rack) is the case that matters
    job = job_manifest("gang", nodes=18, procs=4, gpus=4)
    jobs.create(job)
    placed = running_on(jobs, "gang", 18)
    cliques = {labels["nvidia.com/gpu.clique"] for labels in labels_of(api, placed).values()}
    assert len(cliques) == 1, f"an 18-tray gang spans {len(cliques)} NVLink cliques"
    code, text = run_plan({**job, "metadata": {"name": "gang", "namespace": jobs.ns}}, nodes_yaml(cluster),
                          config=_chart_config(), json_out=True)
    assert code == EXIT_PLACED, text
    out = yaml.safe_load(text)
    assert out["span"]["clique"] == 1 and out["topology"]["preset"] == "nvlink"
    delete_and_wait(jobs, "gang")


def test_aks_without_topology_labels_is_reported(cluster, api, jobs, operator):
    create_pool(cluster, api, provider_nodes.aks_nd_nodes(count=4, kwok=True))
    detected(operator, "none")
    wait_for(lambda: operator.metric("phalanx_topology_unlabelled_nodes") == 4, 30, "4 unlabelled nodes reported")
    wait_for(lambda: "carry no topology labels" in operator.tail(400), 30, "the operator's warning")
    job = {**readme_first_job(), "metadata": {"name": "first", "namespace": jobs.ns}}
    code, text = run_plan(job, nodes_yaml(cluster), config=_chart_config())
    # AKS taints GPU pools sku=gpu, which no resource names: refused until the admin adds it
    assert code == EXIT_UNSCHEDULABLE and "tainted" in text and "no node carries topology labels" in text
    from phalanx.api.config import OperatorConfig

    aks = OperatorConfig.model_validate({**chart_operator_config(), "jobTolerations": [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule", "whenRequesting": ["nvidia.com/gpu"]}]})
    code, text = run_plan(job, nodes_yaml(cluster), config=aks)
    assert code == EXIT_PLACED, text
    assert "toleration: sku Equal gpu NoSchedule ← operator config jobTolerations[0]" in text
    assert "span: hostname 1" in text

