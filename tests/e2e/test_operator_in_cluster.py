"""The operator as the chart installs it: its ServiceAccount may do exactly what it needs, and
its Prometheus endpoint reports the jobs it reconciled."""

from __future__ import annotations

import pytest
from kubernetes import client

# (verb, group, resource, subresource): what the operator does — sufficient …
NEEDED = [
    ("create", "", "pods", ""), ("patch", "", "pods", ""), ("delete", "", "pods", ""),
    ("create", "", "services", ""), ("create", "", "configmaps", ""), ("patch", "", "configmaps", ""),
    ("patch", "phalanx.dev", "trainingjobs", "status"), ("watch", "phalanx.dev", "trainingjobs", ""),
    ("create", "", "events", ""), ("list", "", "nodes", ""), ("watch", "scheduling.k8s.io", "priorityclasses", ""),
    ("watch", "", "namespaces", ""), ("create", "networking.k8s.io", "networkpolicies", ""),
    # a job's first pass reads its namespace's labels by a list by name (a label may be newer than the watch)
    ("list", "", "namespaces", ""),
    # TrainingSweeps: trials are TrainingJobs the operator creates (and suspends to stop early)
    ("create", "phalanx.dev", "trainingjobs", ""), ("watch", "phalanx.dev", "trainingsweeps", ""),
    ("patch", "phalanx.dev", "trainingsweeps", "status"),
    # the kueue backend mirrors Kueue's Workload of the pod group into Schedulable
    ("get", "kueue.x-k8s.io", "workloads", ""),
    # a gang is created pinned only when all of it fits the namespace's ResourceQuotas
    ("watch", "", "resourcequotas", ""),
]
# … and minimal: nothing it does not use.
NOT_NEEDED = [
    ("get", "", "secrets", ""), ("list", "", "secrets", ""), ("create", "", "pods", "exec"),
    ("update", "", "pods", ""), ("delete", "", "services", ""), ("delete", "", "configmaps", ""),
    ("patch", "", "nodes", ""), ("delete", "", "nodes", ""), ("create", "apps", "deployments", ""),
    ("update", "phalanx.dev", "trainingjobs", ""), ("create", "phalanx.dev", "trainingsweeps", ""),
    ("delete", "phalanx.dev", "trainingsweeps", ""), ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
    ("patch", "", "namespaces", ""), ("delete", "networking.k8s.io", "networkpolicies", ""),
    ("update", "", "resourcequotas", ""), ("create", "", "resourcequotas", ""),
]


# Leader election: get/update its one Lease and create it, in the operator's own namespace only.
LEASE_NEEDED = ["get", "update", "create"]
LEASE_NOT_NEEDED = ["delete", "list", "watch", "patch"]


def allowed(authz, user: str, namespace: str, verb: str, group: str, resource: str, sub: str, name: str | None = None) -> bool:
    attrs = client.V1ResourceAttributes(namespace=namespace, verb=verb, group=group, resource=resource,
                                        subresource=sub or None, name=name)
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(user=user, resource_attributes=attrs))
    return authz.create_subject_access_review(review).status.allowed


@pytest.fixture(scope="module")
def operator_identity(operator_deployment):
    dep = operator_deployment
    sa = dep.spec.template.spec.service_account_name
    return f"system:serviceaccount:{dep.metadata.namespace}:{sa}"


def test_chart_rbac_is_sufficient_and_minimal(e2e_api, operator_identity, namespace):
    authz = client.AuthorizationV1Api(e2e_api)
    missing = [n for n in NEEDED if not allowed(authz, operator_identity, namespace, *n)]
    extra = [n for n in NOT_NEEDED if allowed(authz, operator_identity, namespace, *n)]
    assert not missing, f"the chart's RBAC lacks {missing}"
    assert not extra, f"the chart's RBAC grants more than the operator uses: {extra}"


def test_chart_lease_rbac_is_one_lease_in_the_operators_namespace(e2e_api, operator_deployment, operator_identity, namespace):
    authz = client.AuthorizationV1Api(e2e_api)
    args = operator_deployment.spec.template.spec.containers[0].args
    lease = next(a.split("=", 1)[1] for a in args if a.startswith("--leader-elect-lease-name="))
    home = operator_deployment.metadata.namespace
    lease_rbac = ("coordination.k8s.io", "leases", "")
    missing = [v for v in LEASE_NEEDED if not allowed(authz, operator_identity, home, v, *lease_rbac, name=lease)]
    extra = [(v, home, lease) for v in LEASE_NOT_NEEDED if allowed(authz, operator_identity, home, v, *lease_rbac, name=lease)]
    extra += [(v, home, "kube-scheduler") for v in ("get", "update") if allowed(authz, operator_identity, home, v, *lease_rbac, name="kube-scheduler")]
    if namespace != home:
        extra += [(v, namespace, lease) for v in LEASE_NEEDED if allowed(authz, operator_identity, namespace, v, *lease_rbac, name=lease)]
    assert not missing, f"the chart's RBAC lacks {missing} on lease {home}/{lease}"
    assert not extra, f"the chart's RBAC grants more than the operator uses on leases: {extra}"


def test_operator_metrics_reach_prometheus_service(e2e_api, operator_deployment, jobs, runtime_image):
    """Scrape the chart's metrics Service through the API server, as Prometheus would reach it,
    after the operator reconciled a job (suspended: no pods), whatever ran before."""
    from tests.e2e.test_kind_e2e import small_job
    from tests.integration.harness import wait_for

    obj = small_job("e2e-metrics", runtime_image)
    obj["spec"]["suspend"] = True
    jobs.create(obj)
    wait_for(lambda: jobs.status("e2e-metrics").get("phase") == "Suspended", 120, "the job to be reconciled")
    dep = operator_deployment
    core = client.CoreV1Api(e2e_api)
    text = core.connect_get_namespaced_service_proxy_with_path(
        f"{dep.metadata.name}-metrics:metrics", dep.metadata.namespace, "metrics")
    assert "phalanx_reconciles_total" in text and 'result="ok"' in text
    assert "phalanx_jobs" in text
