"""Cluster-side helpers: create simulated nodes, finish pods (uses the kubernetes client)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .topology import KWOK_NODE_SELECTOR, Topology, load_topology, node_manifests

SIM_EXIT_CODE_ANNOTATION = "phalanx.dev/sim-exit-code"
SIM_EXIT_DELAY_ANNOTATION = "phalanx.dev/sim-exit-delay-ms"


def api_client(kubeconfig: str | Path, pool_size: int = 4):
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


def create_nodes(
    kubeconfig: str | Path,
    topology: Topology | str | Path,
    *,
    workers: int = 16,
    wait_ready: bool = True,
    timeout: float = 300.0,
) -> list[str]:
    """Create every Node of ``topology``; a Node that already exists gets its labels,
    annotations, taints and capacity patched to the topology's (create-or-update).

    Requests go out concurrently on ``workers`` threads sharing one connection pool.
    With ``wait_ready`` it waits until kwok has marked them all Ready. Returns the names.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    topo = topology if isinstance(topology, Topology) else load_topology(topology)
    manifests = node_manifests(topo)
    api = api_client(kubeconfig, pool_size=max(workers, 4))
    core = client.CoreV1Api(api)

    def one(m: dict[str, Any]) -> str:
        for attempt in range(5):
            try:
                core.create_node(m)
                break
            except ApiException as e:
                if e.status == 409:
                    name = m["metadata"]["name"]
                    core.patch_node(name, {"metadata": m["metadata"], "spec": m["spec"]})
                    core.patch_node_status(name, {"status": m["status"]})
                    break
                if e.status in (429, 500, 503, 504) and attempt < 4:
                    time.sleep(0.5 * (attempt + 1))
                    continue
                raise
        return m["metadata"]["name"]

    with ThreadPoolExecutor(max_workers=workers) as ex:
        names = list(ex.map(one, manifests))
    if wait_ready:
        wait_nodes_ready(kubeconfig, set(names), timeout=timeout, api=api)
    return names


NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def wait_nodes_ready(
    kubeconfig: str | Path, names: set[str], *, timeout: float = 300.0, api=None
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api or api_client(kubeconfig))
    deadline = time.monotonic() + timeout
    pending = set(names)
    while True:
        nodes = core.list_node(label_selector="type=kwok").items
        for n in nodes:
            conds = {c.type: c.status for c in (n.status.conditions or [])}
            # Ready, and the node lifecycle controller has lifted the not-ready taint it put on the
            # new node: until then a planner counts the node as tainted
            tainted = any(t.key in NOT_READY_TAINTS for t in n.spec.taints or [])
            if conds.get("Ready") == "True" and not tainted:
                pending.discard(n.metadata.name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} nodes not Ready after {timeout}s, e.g. {sorted(pending)[:5]}")
        time.sleep(0.5)


def delete_kwok_nodes(kubeconfig: str | Path) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client(kubeconfig))
    for n in core.list_node().items:
        if (n.metadata.annotations or {}).get("kwok.x-k8s.io/node") == KWOK_NODE_SELECTOR.split("=")[1]:
            core.delete_node(n.metadata.name)


def finish_pod(
    kubeconfig_or_api: Any,
    namespace: str,
    name: str,
    exit_code: int = 0,
    *,
    via: str = "annotation",
    delay_ms: int | None = None,
) -> None:
    """Make a kwok-played pod terminate with ``exit_code`` (0 -> Succeeded, else Failed).

    ``via="annotation"`` sets ``phalanx.dev/sim-exit-code`` and kwok's Phalanx stage
    writes the terminated status (optionally after ``delay_ms``). ``via="status"`` patches
    the pod's status subresource directly, as a kubelet would: works with any pod that no
    real kubelet owns, with or without kwok's stages.
    """
    from kubernetes import client

    api = kubeconfig_or_api
    if isinstance(api, str | Path):
        api = api_client(api)
    core = client.CoreV1Api(api)
    if via == "annotation":
        ann = {SIM_EXIT_CODE_ANNOTATION: str(exit_code)}
        if delay_ms is not None:
            ann[SIM_EXIT_DELAY_ANNOTATION] = str(delay_ms)
        core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": ann}})
        return
    if via != "status":
        raise ValueError(f"via must be 'annotation' or 'status', not {via!r}")
    pod = core.read_namespaced_pod(name, namespace)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    phase = "Succeeded" if exit_code == 0 else "Failed"
    reason = "Completed" if exit_code == 0 else "Error"
    statuses = [
        {
            "name": c.name,
            "image": c.image,
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": now,
                    "finishedAt": now,
                }
            },
        }
        for c in pod.spec.containers
    ]
    body = {
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
            ],
            "containerStatuses": statuses,
        }
    }
    core.patch_namespaced_pod_status(name, namespace, body)
