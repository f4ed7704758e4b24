"""End-to-end tests: real pods that train, on a cluster with Phalanx installed by its chart.

The cluster, first match wins: the one ``PHALANX_E2E_KUBECONFIG`` names (a cluster with the chart
installed that the suite may use: it creates jobs, namespaces and PVCs there); with
``PHALANX_E2E_UP=1`` (``make test`` sets it) the kind cluster of ``hack/kind-e2e.sh up`` — created
when missing, images loaded, chart installed — once the earlier suites are done. ``KUBECONFIG`` is
never read. ``hack/kind-e2e.sh test`` runs this suite alone. Without a cluster the tests skip, unless ``PHALANX_REQUIRE_E2E=1``
(then they fail).

Environment: ``PHALANX_E2E_IMAGE`` (runtime image, default phalanx/runtime:<version>),
``PHALANX_E2E_NAMESPACE`` (default ``default``; needs a ReadWriteMany PVC ``phalanx-shared``),
``PHALANX_E2E_SHARED_DIR`` (where that volume is visible on this machine, to check the checkpoint
files themselves; the kind cluster's ``shared/`` when ``PHALANX_E2E_UP=1`` brought it up).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from kubernetes import client, config

from phalanx import __version__
from tests.integration.harness import Jobs, wait_for

GROUP, VERSION = "phalanx.dev", "v1alpha1"
ROOT = Path(__file__).resolve().parents[2]
UP_TIMEOUT = 3600  # a cold machine builds the node image, the images and the torch wheelhouse


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def e2e_api():
    path = os.environ.get("PHALANX_E2E_KUBECONFIG")
    if not path and os.environ.get("PHALANX_E2E_UP") == "1":
        path = kind_up()
    if not path or not Path(path).is_file():
        if os.environ.get("PHALANX_REQUIRE_E2E") == "1":
            pytest.fail("PHALANX_REQUIRE_E2E=1 but no cluster: set PHALANX_E2E_KUBECONFIG or PHALANX_E2E_UP=1")
        pytest.skip("no e2e cluster: run hack/kind-e2e.sh test")
    api_client = config.new_client_from_config(config_file=path)
    yield api_client
    api_client.close()


@pytest.fixture(scope="session")
def operator_deployment(e2e_api):
    """The operator Deployment the chart installed, once it is ready."""
    apps = client.AppsV1Api(e2e_api)
    found = apps.list_deployment_for_all_namespaces(label_selector="app.kubernetes.io/name=phalanx-operator").items
    assert found, "the phalanx chart is not installed on this cluster (helm install phalanx charts/phalanx)"
    dep = found[0]
    wait_for(lambda: apps.read_namespaced_deployment(dep.metadata.name, dep.metadata.namespace).status.ready_replicas or None,
             180, "the operator Deployment to be ready")
    return dep


def kind_up() -> str:
    """`hack/kind-e2e.sh up` (idempotent); its log goes to $PHALANX_KIND_DIR/up.log."""
    state = Path(os.environ.get("PHALANX_KIND_DIR", ROOT / ".kind"))
    state.mkdir(parents=True, exist_ok=True)
    log = state / "up.log"
    with log.open("w") as out:
        proc = subprocess.run([str(ROOT / "hack" / "kind-e2e.sh"), "up"], stdout=out, stderr=subprocess.STDOUT,
                              timeout=UP_TIMEOUT, env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"})
    if proc.returncode != 0:
        pytest.fail(f"hack/kind-e2e.sh up failed (exit {proc.returncode}):\n" + "".join(log.read_text().splitlines(True)[-40:]))
    return str(state / "kubeconfig")


@pytest.fixture(scope="session")
def namespace() -> str:
    return os.environ.get("PHALANX_E2E_NAMESPACE", "default")


@pytest.fixture
def jobs(e2e_api, operator_deployment, namespace, shared_dir):
    created: list[str] = []
    j = Jobs(e2e_api, namespace)
    create = j.create

    def tracked(obj):
        name = obj["metadata"]["name"]
        created.append(name)
        if shared_dir:  # a rerun on the same cluster must not resume the last run's checkpoints
            shutil.rmtree(shared_dir / namespace / name, ignore_errors=True)
        return create(obj)

    j.create = tracked  # type: ignore[method-assign]
    yield j
    for name in created:
        try:
            j.delete(name)
        except client.ApiException:
            pass


@pytest.fixture(scope="session")
def runtime_image() -> str:
    return os.environ.get("PHALANX_E2E_IMAGE", f"phalanx/runtime:{__version__}")


@pytest.fixture(scope="session")
def shared_dir(namespace) -> Path | None:
    """Where the shared volume is visible here: ``PHALANX_E2E_SHARED_DIR``, else, on the kind
    cluster ``PHALANX_E2E_UP=1`` brings up, its state's ``shared/`` (hack/kind/lib.sh: the nodes
    mount it as the ``phalanx-shared`` volume)."""
    d = os.environ.get("PHALANX_E2E_SHARED_DIR")
    if not d and os.environ.get("PHALANX_E2E_UP") == "1" and not os.environ.get("PHALANX_E2E_KUBECONFIG"):
        return Path(os.environ.get("PHALANX_KIND_DIR", ROOT / ".kind")) / "shared"
    return Path(d) if d else None
