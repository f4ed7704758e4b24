"""The per-job NetworkPolicy, enforced: a job's pods take connections from their own gang on every
port, from the operator on ``progress`` and ``metrics``, from the metrics scraper on ``metrics`` —
and from no one else. Two tests: the rendered policy with every peer pinned by namespace (pods
serving each port), and the chart as installed (its default scraper, any namespace) in front of
a real training pod whose ``phalanx_runtime_*`` series a Prometheus-labelled pod must read.

Needs a cluster whose network plugin enforces NetworkPolicies: on kind, ``hack/kind/netpol.sh``
installs kube-network-policies (or ``PHALANX_KIND_NETPOL=1 hack/kind-e2e.sh up``); the stock kind
route's kindnetd enforces them too. The test skips when no enforcer is found: one of those two
DaemonSets ready on every node, or ``PHALANX_E2E_NETPOL_ENFORCED=1`` for another plugin (Calico,
Cilium, …).

The pods are small: ``PHALANX_E2E_NETPOL_IMAGE`` (default the operator image, for its python3),
non-root and restricted in two namespaces of their own that enforce Pod Security ``restricted``:
a "jobs" namespace (the server of job A, a gang member of A, a pod of job B, a pod with the
operator's labels) and an "operator" namespace (the operator and the scraper, matched by
namespace and pod labels as the chart configures them).
"""

from __future__ import annotations

import json
import os
import textwrap
import time
import uuid
from functools import partial

import pytest
import yaml
from kubernetes import client

from phalanx import __version__, constants
from phalanx.api.config import NetworkPolicyConfig
from phalanx.api.types import TrainingJob
from phalanx.render.names import network_policy_name
from phalanx.render.networkpolicy import build_network_policy
from tests.integration.harness import wait_for

IMAGE = os.environ.get("PHALANX_E2E_NETPOL_IMAGE", f"phalanx/operator:{__version__}")
PORTS = {constants.PORT_NAME_RENDEZVOUS: constants.DEFAULT_MASTER_PORT, constants.PORT_NAME_PROGRESS: constants.PROGRESS_PORT,
         constants.PORT_NAME_METRICS: constants.METRICS_PORT}
OPERATOR_LABELS = {"app.kubernetes.io/name": "phalanx-operator"}
SCRAPER_LABELS = {"app.kubernetes.io/name": "prometheus"}
WINDOW_S = 20       # each client tries every port for this long ...
VERDICT_TRIES = 2   # ... and its last tries decide (the enforcer may lag a new pod's IP by a moment)

SERVER = textwrap.dedent("""
    import socket, sys, threading
    def serve(port):
        s = socket.create_server(("", port))
        while True:
            c, _ = s.accept()
            c.sendall(b"ok")
            c.close()
    for p in sys.argv[1:]:
        threading.Thread(target=serve, args=(int(p),), daemon=True).start()
    threading.Event().wait()
""")
CLIENT = textwrap.dedent("""
    import json, socket, sys, time
    host, ports, window = sys.argv[1], [int(p) for p in sys.argv[2].split(",")], float(sys.argv[3])
    def attempt(port):
        try:
            with socket.create_connection((host, port), timeout=1.5) as s:
                s.settimeout(1.5)
                return s.recv(2) == b"ok"
        except OSError:
            return False
    tries = {p: [] for p in ports}
    end = time.monotonic() + window
    while time.monotonic() < end:
        for p in ports:
            tries[p].append(attempt(p))
        time.sleep(0.5)
    print(json.dumps(tries))
""")


def enforcer_present(api) -> str | None:
    """Why the test must skip, or None when a NetworkPolicy enforcer runs: kube-network-policies
    (hack/kind/netpol.sh), or stock kind's kindnetd (it embeds kube-network-policies). The offline
    node image's own `kindnet` DaemonSet (hack/kind/node/cni.sh) enforces nothing."""
    if os.environ.get("PHALANX_E2E_NETPOL_ENFORCED") == "1":
        return None
    apps = client.AppsV1Api(api)
    for name, image in (("kube-network-policies", ""), ("kindnet", "kindest/kindnetd")):
        try:
            ds = apps.read_namespaced_daemon_set(name, "kube-system")
        except client.ApiException as e:
            if e.status != 404:
                raise
            continue
        if image not in ds.spec.template.spec.containers[0].image:
            continue
        st = ds.status
        if not st.desired_number_scheduled or st.number_ready != st.desired_number_scheduled:
            return f"{name} is not ready ({st.number_ready}/{st.desired_number_scheduled} pods)"
        return None
    return ("no NetworkPolicy enforcer on this cluster (no DaemonSet kube-system/kube-network-policies; "
            "hack/kind/netpol.sh installs it, PHALANX_E2E_NETPOL_ENFORCED=1 names another plugin)")


def restricted_pod(name: str, namespace: str, labels: dict[str, str], args: list[str], ports: dict[str, int] | None = None,
                   restart: str = "Never") -> dict:
    container = {
        "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent", "command": ["python3", "-c"], "args": args,
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if ports:
        container["ports"] = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports.items()]
        container["readinessProbe"] = {"tcpSocket": {"port": constants.PORT_NAME_PROGRESS}, "periodSeconds": 1}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": restart, "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
        },
    }


def check_image(core, namespace: str, name: str) -> None:
    """Fail at once, with the fix, when the image is not on the node (no registry on kind)."""
    for cs in core.read_namespaced_pod(name, namespace).status.container_statuses or []:
        waiting = cs.state.waiting
        if waiting and waiting.reason in ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull"):
            pytest.fail(f"pod {namespace}/{name}: {waiting.reason} for {IMAGE} ({waiting.message}); "
                        "load it onto the nodes (hack/kind-e2e.sh up loads the operator image) "
                        "or set PHALANX_E2E_NETPOL_IMAGE to an image with python3")


@pytest.fixture
def enforced(e2e_api):
    reason = enforcer_present(e2e_api)
    if reason:
        pytest.skip(reason)


@pytest.fixture
def two_namespaces(e2e_api, enforced):
    core = client.CoreV1Api(e2e_api)
    suffix = uuid.uuid4().hex[:6]
    names = (f"netpol-jobs-{suffix}", f"netpol-operator-{suffix}")
    for ns in names:
        core.create_namespace({"metadata": {"name": ns, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted", "phalanx.dev/e2e": "network-policy"}}})
    yield names
    for ns in names:
        try:
            core.delete_namespace(ns, grace_period_seconds=0)
        except client.ApiException:
            pass


def test_job_network_policy_admits_only_gang_operator_and_scraper(e2e_api, two_namespaces):
    core, net = client.CoreV1Api(e2e_api), client.NetworkingV1Api(e2e_api)
    jobs_ns, operator_ns = two_namespaces
    job_a, job_b = "netpol-a", "netpol-b"

    # The policy of job A as the operator renders it, with the peers the chart configures
    # (the operator's namespace by name + its pod labels), here pointed at the test's namespace.
    job = TrainingJob.model_validate({"metadata": {"name": job_a, "namespace": jobs_ns, "uid": "e2e"},
                                      "spec": {"image": IMAGE, "model": {"preset": "debug"}, "nodes": 1}})
    in_operator_ns = {"kubernetes.io/metadata.name": operator_ns}
    policy = build_network_policy(job, NetworkPolicyConfig(
        operator_namespace_labels=in_operator_ns, operator_pod_labels=OPERATOR_LABELS,
        scraper_namespace_labels=in_operator_ns, scraper_pod_labels=SCRAPER_LABELS))
    policy["metadata"].pop("ownerReferences")  # no TrainingJob owns it here: the garbage collector would delete it
    net.create_namespaced_network_policy(jobs_ns, policy)

    # Job A's "rank 0": a TCP server on the three named ports (every connection is answered "ok").
    server = restricted_pod("server", jobs_ns, {constants.LABEL_JOB_NAME: job_a}, [SERVER, *map(str, PORTS.values())],
                            ports=PORTS, restart="Always")
    core.create_namespaced_pod(jobs_ns, server)

    def server_ready():
        check_image(core, jobs_ns, "server")
        pod = core.read_namespaced_pod("server", jobs_ns)
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        return pod.status.pod_ip if ready else None

    server_ip = wait_for(server_ready, 180, "job A's server pod to be ready")

    # Who tries to connect, from where, and what each port must answer.
    every_port = ",".join(map(str, PORTS.values()))
    clients = {  # name: (namespace, labels, {port name: expected open})
        "gang-member": (jobs_ns, {constants.LABEL_JOB_NAME: job_a}, {"rendezvous": True, "progress": True, "metrics": True}),
        "other-job": (jobs_ns, {constants.LABEL_JOB_NAME: job_b}, {"rendezvous": False, "progress": False, "metrics": False}),
        "operator": (operator_ns, OPERATOR_LABELS, {"rendezvous": False, "progress": True, "metrics": True}),
        "scraper": (operator_ns, SCRAPER_LABELS, {"rendezvous": False, "progress": False, "metrics": True}),
        # the operator's pod labels in the wrong namespace: the namespace selector matters
        "operator-lookalike": (jobs_ns, OPERATOR_LABELS, {"rendezvous": False, "progress": False, "metrics": False}),
    }
    for name, (ns, labels, _) in clients.items():
        core.create_namespaced_pod(ns, restricted_pod(name, ns, labels, [CLIENT, server_ip, every_port, str(WINDOW_S)]))

    def finished(name, ns):
        check_image(core, ns, name)
        return core.read_namespaced_pod(name, ns).status.phase in ("Succeeded", "Failed")

    deadline = time.monotonic() + 180 + WINDOW_S
    observed, failures = {}, []
    for name, (ns, _, expected) in clients.items():
        wait_for(partial(finished, name, ns), max(deadline - time.monotonic(), 1), f"client {ns}/{name} to finish")
        log = core.read_namespaced_pod_log(name, ns).strip().splitlines()
        tries = {int(p): v for p, v in json.loads(log[-1]).items()}
        for port_name, want in expected.items():
            history = tries[PORTS[port_name]]
            last = history[-VERDICT_TRIES:]
            got = all(last) if want else any(last)
            observed[f"{name} -> {port_name}"] = ["open" if t else "closed" for t in history]
            if got != want:
                failures.append(f"{ns}/{name} -> {port_name} ({PORTS[port_name]}): expected "
                                f"{'open' if want else 'closed'}, tries {observed[f'{name} -> {port_name}']}")
    print("\n".join(f"{k}: {' '.join(v)}" for k, v in observed.items()))  # shown with -s and on failure
    assert not failures, "NetworkPolicy not enforced as rendered:\n" + "\n".join(failures) + \
        f"\npolicy: {json.dumps(policy['spec'])}"


# A scrape as Prometheus makes it: GET /metrics; a try counts when the runtime's series are in it.
SCRAPE = textwrap.dedent("""
    import json, sys, time, urllib.request
    url, window = sys.argv[1], float(sys.argv[2])
    tries, sample = [], ""
    end = time.monotonic() + window
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1.5) as r:
                lines = [l for l in r.read().decode().splitlines() if l.startswith("phalanx_runtime_step")]
            tries.append(bool(lines))
            sample = sample or (lines[0] if lines else "")
        except Exception:  # refused, dropped (timeout), reset: not scraped
            tries.append(False)
        time.sleep(0.5)
    print(json.dumps({"tries": tries, "sample": sample}))
""")


def installed_network_policy_config(core, operator_deployment) -> dict:
    """The networkPolicy section of the operator config the chart installed (its ConfigMap)."""
    volumes = operator_deployment.spec.template.spec.volumes or []
    name = next(v.config_map.name for v in volumes if v.config_map is not None)
    cm = core.read_namespaced_config_map(name, operator_deployment.metadata.namespace)
    return yaml.safe_load(cm.data["config.yaml"]).get("networkPolicy") or {}


@pytest.fixture
def monitoring_namespace(e2e_api, enforced):
    """A namespace of its own for the scrapers: neither the jobs' nor the operator's."""
    core = client.CoreV1Api(e2e_api)
    ns = f"netpol-monitoring-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "phalanx.dev/e2e": "network-policy"}}})
    yield ns
    try:
        core.delete_namespace(ns, grace_period_seconds=0)
    except client.ApiException:
        pass


@pytest.mark.timeout(900)
def test_chart_defaults_let_prometheus_scrape_a_training_pod(e2e_api, monitoring_namespace, operator_deployment, jobs,
                                                             runtime_image):
    """The chart's default networkPolicy values, as installed: the operator's policy for a real
    training job lets a pod with the default scraper labels, in another namespace, read the
    runtime's series from the metrics port; the same pod without those labels is refused."""
    core, net = client.CoreV1Api(e2e_api), client.NetworkingV1Api(e2e_api)
    defaults = NetworkPolicyConfig()
    installed = installed_network_policy_config(core, operator_deployment)
    if (installed.get("scraperNamespaceLabels"), installed.get("scraperPodLabels")) != \
            (defaults.scraper_namespace_labels, defaults.scraper_pod_labels):
        pytest.skip(f"the chart is installed with other scraper values: {installed}")

    name = f"netpol-scrape-{uuid.uuid4().hex[:5]}"
    jobs.create({
        "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {"image": runtime_image, "nodes": 1, "procsPerNode": 1, "resources": {"cpu": "500m", "memory": "2Gi"},
                 "model": {"preset": "debug"}, "data": {"source": "synthetic", "seqLen": 64},
                 # runs until the test deletes it: the scrapes need it serving for their whole window
                 "training": {"steps": 1000000, "globalBatchSize": 2, "precision": "fp32"}},
    })

    def serving():
        status = jobs.status(name)
        assert status.get("phase") != "Failed", f"{name} failed: {status.get('message')}"
        pods = jobs.pods(name)
        for pod in pods:
            for cs in pod.status.container_statuses or []:
                waiting = cs.state.waiting
                if waiting and waiting.reason in ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull"):
                    pytest.fail(f"{pod.metadata.name}: {waiting.reason} for {runtime_image}: the runtime image is "
                                "not on the workers (hack/kind-e2e.sh up loads it unless PHALANX_KIND_IMAGES=operator)")
        # the metrics endpoint serves from setup on; the first step puts values in the series
        ip = pods[0].status.pod_ip if pods else None
        return ip if ip and (status.get("step") or 0) >= 1 else None

    pod_ip = wait_for(serving, 420, f"{name} to run its first step", interval=2)
    policy = net.read_namespaced_network_policy(network_policy_name(name), jobs.ns).to_dict()

    url = f"http://{pod_ip}:{constants.METRICS_PORT}/metrics"
    clients = {"prometheus": (dict(defaults.scraper_pod_labels), True), "unlabelled": ({}, False)}
    for pod_name, (labels, _) in clients.items():
        core.create_namespaced_pod(monitoring_namespace, restricted_pod(
            pod_name, monitoring_namespace, labels, [SCRAPE, url, str(WINDOW_S)]))

    def finished(pod_name):
        check_image(core, monitoring_namespace, pod_name)
        return core.read_namespaced_pod(pod_name, monitoring_namespace).status.phase in ("Succeeded", "Failed")

    deadline = time.monotonic() + 180 + WINDOW_S
    failures, seen = [], {}
    for pod_name, (labels, want) in clients.items():
        wait_for(partial(finished, pod_name), max(deadline - time.monotonic(), 1), f"scraper {pod_name} to finish")
        result = json.loads(core.read_namespaced_pod_log(pod_name, monitoring_namespace).strip().splitlines()[-1])
        last = result["tries"][-VERDICT_TRIES:]
        seen[pod_name] = " ".join("scraped" if t else "refused" for t in result["tries"]) + f" | {result['sample']}"
        if (all(last) if want else any(last)) != want:
            failures.append(f"{monitoring_namespace}/{pod_name} {labels} -> {url}: expected "
                            f"{'scraped' if want else 'refused'}, tries: {seen[pod_name]}")
    print("\n".join(f"{k}: {v}" for k, v in seen.items()))  # shown with -s and on failure
    assert not failures, "the chart's default scraper rule is not enforced as expected:\n" + "\n".join(failures) + \
        f"\npolicy: {json.dumps(policy['spec'], default=str)}"
