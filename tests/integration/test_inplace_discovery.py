"""In-place restart discovery and rendering against the real API server (Kubernetes 1.36): the
probe keeps its RestartAllContainers rule under Pod Security "restricted", a gang's pods rendered
with their restart rule and request file are valid, and kwok's kubelets, which declare no
features, turn in-place restarts off."""

from __future__ import annotations

import asyncio

from kubernetes import client

from phalanx import startup
from phalanx.api.config import OperatorConfig
from phalanx.kube import Kube, load_client
from phalanx.lifecycle import inplace
from phalanx.render import render_children
from phalanx.validate import parse_job
from tests.integration.harness import job_manifest


def _with_kube(cluster, call):
    async def main():
        kube = Kube(load_client(str(cluster.kubeconfig)), concurrency=2)
        try:
            return await call(kube)
        finally:
            kube.pool.shutdown()
    return asyncio.run(main())


def test_the_probe_keeps_its_rule_and_the_rendered_pods_are_valid(cluster, api, namespace):
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    answer = _with_kube(cluster, lambda kube: kube.dry_run_pod(inplace.probe_pod(namespace)))
    assert inplace.rules_kept(answer), answer["spec"]["containers"][0]
    obj = job_manifest("inplace", nodes=2, procs=1, gpus=0)
    obj["metadata"]["namespace"] = namespace
    config = OperatorConfig().with_restart_all_containers(True)
    pods = [c for c in render_children(parse_job(obj), config, 0) if c["kind"] == "Pod"]
    for pod in pods:
        pod["metadata"].pop("ownerReferences", None)
        kept = _with_kube(cluster, lambda kube, pod=pod: kube.dry_run_pod(pod))
        assert inplace.rules_kept(kept) and kept["spec"]["containers"][0]["restartPolicy"] == "Never"


def test_kwok_nodes_turn_in_place_restarts_off(cluster, namespace, pool):
    assert _with_kube(cluster, lambda kube: kube.list_nodes()), "the cluster has nodes"
    assert _with_kube(cluster, lambda kube: startup._discover_in_place(kube, [namespace])) is False
