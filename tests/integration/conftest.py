"""Integration tests: a real control plane, local or any cluster named by a kubeconfig.

Which cluster the session-scoped ``cluster`` fixture uses, first match wins:

1. ``KUBECONFIG_PHALANX`` (a kubeconfig path) with ``PHALANX_CLUSTER_DISPOSABLE=1``: that
   cluster, as is. The tests replace the CRDs, create kwok Node objects, and start operators
   without leader election, so they refuse a cluster they did not start unless told it is
   disposable; ``KUBECONFIG`` is never used.
2. a cluster from ``make cluster-up`` (``.local-cluster/cluster.json``, still running).
3. a fresh ``LocalCluster`` in a temp dir, with the ``PHALANX_TOPOLOGY`` (default
   ``small-4``) kwok nodes; stopped at session end.

If 3 is needed but the binaries are missing (``make cluster-binaries``), the tests are
skipped, or fail when ``PHALANX_REQUIRE_CLUSTER`` is set (CI sets it).
``PHALANX_TOPOLOGY`` also adds that topology's nodes to a reused cluster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from localcluster import (
    KWOK_ANNOTATION,
    LocalCluster,
    create_nodes,
    default_bin_dir,
    missing_binaries,
)
from localcluster.nodes import api_client
from tests.builds import build_if_required, required


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed integration test's report carries the tail of every running operator's log: the
    decisions behind a timeout, which a rerun of a rare race may not show again."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        from tests.integration.harness import OperatorProcess

        for op in sorted(OperatorProcess.running, key=lambda o: o.name):
            report.sections.append((f"operator log ({op.name}, last 80 lines)", op.tail(80)))


def require_binaries(bin_dir: Path, what: str, alternative: str = "") -> None:
    """Skip without the control-plane binaries; with ``PHALANX_REQUIRE_CLUSTER`` (CI, ``make test``)
    build them instead (or wait for the build under way), and fail if that fails."""
    missing = missing_binaries(bin_dir)
    if missing:
        try:
            build_if_required()
        except RuntimeError as e:
            pytest.fail(f"{what}: {e} [PHALANX_REQUIRE_CLUSTER is set]", pytrace=False)
        missing = missing_binaries(bin_dir)
    if missing:
        msg = (f"{what}: control-plane binaries missing from {bin_dir} ({', '.join(missing)}); run "
               f"`make cluster-binaries` (hack/cluster/build.sh){', ' + alternative if alternative else ''}")
        if required():
            pytest.fail(msg + " [PHALANX_REQUIRE_CLUSTER is set]", pytrace=False)
        pytest.skip(msg)


@dataclass
class ClusterHandle:
    kubeconfig: Path
    kubectl_bin: str | None
    source: str  # "env:KUBECONFIG_PHALANX", "cluster-up", "local"
    local: LocalCluster | None = None

    def api(self, pool_size: int = 4):
        """A fresh kubernetes.client.ApiClient for this cluster."""
        return api_client(self.kubeconfig, pool_size=pool_size)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        if not self.kubectl_bin:
            pytest.skip("no kubectl binary")
        return subprocess.run(
            [self.kubectl_bin, f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True, check=check, timeout=timeout,
        )

    def kwok_nodes(self) -> list[str]:
        from kubernetes import client

        with self.api() as api:
            nodes = client.CoreV1Api(api).list_node().items
        return sorted(
            n.metadata.name
            for n in nodes
            if (n.metadata.annotations or {}).get(KWOK_ANNOTATION) == "fake"
        )


def foreign_cluster_refusal(kubeconfig: str, disposable: str | None) -> str | None:
    """Why the tests must not run against the cluster `kubeconfig` names (None: they may)."""
    if not Path(kubeconfig).is_file():
        return f"KUBECONFIG_PHALANX={kubeconfig}: no such file"
    if disposable != "1":
        return (
            f"KUBECONFIG_PHALANX={kubeconfig}: the integration tests replace the CRDs, create kwok "
            "Node objects and start operators without leader election; run them only against a "
            "disposable cluster and say so with PHALANX_CLUSTER_DISPOSABLE=1"
        )
    return None


def _kubectl_for(bin_dir: Path) -> str | None:
    p = bin_dir / "kubectl"
    return str(p) if os.access(p, os.X_OK) else shutil.which("kubectl")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> ClusterHandle:
    bin_dir = default_bin_dir()
    topology = os.environ.get("PHALANX_TOPOLOGY")
    kc = os.environ.get("KUBECONFIG_PHALANX")
    if kc:
        refusal = foreign_cluster_refusal(kc, os.environ.get("PHALANX_CLUSTER_DISPOSABLE"))
        if refusal:
            pytest.fail(refusal, pytrace=False)
        h = ClusterHandle(Path(kc), _kubectl_for(bin_dir), "env:KUBECONFIG_PHALANX")
        if topology:
            create_nodes(h.kubeconfig, topology)
        yield h
        return

    attached = LocalCluster.attach()
    if attached is not None and attached.running():
        h = ClusterHandle(attached.kubeconfig, _kubectl_for(attached.bin_dir), "cluster-up")
        if topology:
            create_nodes(h.kubeconfig, topology)
        yield h
        return

    require_binaries(bin_dir, "no cluster", "or point KUBECONFIG_PHALANX at a disposable cluster (with "
                     "PHALANX_CLUSTER_DISPOSABLE=1)")

    work = tmp_path_factory.mktemp("local-cluster")
    t0 = time.monotonic()
    with started_cluster(work, "local", topology=topology or "small-4") as handle:
        print(f"\nlocal cluster up in {time.monotonic() - t0:.1f}s at {handle.local.server} ({work})")
        yield handle


@contextlib.contextmanager
def started_cluster(work: Path, source: str, *, features: tuple[str, ...] = (), topology: str | None = None):
    """A fresh LocalCluster in ``work`` (alpha ``features``, ``topology``'s kwok nodes), its
    handle, and the cluster stopped on exit: the session's and the modules' own control planes."""
    local = LocalCluster(work_dir=work, bin_dir=default_bin_dir(), features=list(features))
    local.start()
    try:
        if topology:
            create_nodes(local.kubeconfig, topology)
        yield ClusterHandle(local.kubeconfig, local.kubectl, source, local)
    finally:
        local.stop()


@pytest.fixture
def namespace(cluster: ClusterHandle):
    """A fresh namespace (deleted afterwards) whose `default` service account exists."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = f"it-{uuid.uuid4().hex[:8]}"
    with cluster.api() as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": name, "labels": {"phalanx.dev/test": "true"}}})
        deadline = time.monotonic() + 60
        while True:
            try:
                core.read_namespaced_service_account("default", name)
                break
            except ApiException as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield name
        try:
            core.delete_namespace(name)
        except ApiException as e:
            if e.status != 404:
                raise
