"""Helm chart: lint, template variants, least-privilege RBAC, operator config round-trip."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from localcluster.binaries import default_bin_dir
from phalanx.api.config import OperatorConfig
from tests.builds import build_if_required

CHART = Path(__file__).resolve().parents[2] / "charts" / "phalanx"


def helm() -> str:
    """The helm hack/cluster/build.sh built; with ``PHALANX_REQUIRE_CLUSTER`` (``make test``, CI) it
    builds it or waits for the build under way (these tests need no cluster, so they may come
    before the cluster fixture has waited for it), else the test skips without it."""
    path = default_bin_dir() / "helm"
    if not path.exists():
        build_if_required()
    if not path.exists():
        pytest.skip(f"helm not built ({path}); run hack/cluster/build.sh")
    return str(path)


def template(*sets: str) -> list[dict]:
    args = [helm(), "template", "rel", str(CHART), "-n", "phalanx-system"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def test_lint():
    res = subprocess.run([helm(), "lint", str(CHART)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_deployment_two_leader_elected_replicas_with_liveness_and_pdb():
    docs = template()
    deploy = by_kind(docs, "Deployment")[0]
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"  # the Lease guards the overlap
    pod = deploy["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert c["command"] == ["phalanx"] and c["args"][0] == "operator"
    assert "--all-namespaces" in c["args"]
    assert "--leader-elect" in c["args"] and "--leader-elect-lease-name=rel-operator-leader" in c["args"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["runAsNonRoot"] is True
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    pdb = by_kind(docs, "PodDisruptionBudget")[0]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]


def test_single_replica_without_leader_election_is_recreated_without_pdb():
    docs = template("replicas=1", "leaderElection.enabled=false")
    deploy = by_kind(docs, "Deployment")[0]
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"] == {"type": "Recreate"}
    assert not any(a.startswith("--leader-elect") for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"])
    assert not by_kind(docs, "PodDisruptionBudget")
    assert not [r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-leader")]


def test_two_replicas_without_leader_election_fail_clearly():
    res = subprocess.run([helm(), "template", "rel", str(CHART), "--set", "leaderElection.enabled=false"], capture_output=True, text=True)
    assert res.returncode != 0 and "replicas > 1 needs leaderElection.enabled" in res.stderr, res.stderr


def test_operator_pod_passes_pod_security_restricted(cluster, api, namespace):
    """The chart's operator pod, created (dry run) in a namespace enforcing "restricted"; the same
    pod without its seccomp profile is refused — the check is real."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(api)
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    template_ = by_kind(template(), "Deployment")[0]["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator", "labels": template_["metadata"]["labels"]},
           "spec": template_["spec"]}
    pod["spec"]["serviceAccountName"] = "default"
    core.create_namespaced_pod(namespace, pod, dry_run="All")
    del pod["spec"]["securityContext"]["seccompProfile"]
    del pod["spec"]["containers"][0]["securityContext"]["seccompProfile"]
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    assert refused.value.status == 403 and "seccompProfile" in refused.value.body


def test_operator_config_parses():
    cm = by_kind(template(), "ConfigMap")[0]
    config = OperatorConfig.model_validate(yaml.safe_load(cm["data"]["config.yaml"]))
    assert list(config.network_profiles) == ["default"]
    assert config.topology.preset == "auto" and config.topology.levels == [] and config.job_tolerations == []


@pytest.mark.parametrize(("values", "namespaces", "pods"), [
    ((), {}, {"app.kubernetes.io/name": "prometheus"}),  # the defaults: Prometheus pods, any namespace
    (("networkPolicy.scraperNamespaceLabels.kubernetes\\.io/metadata\\.name=monitoring",),
     {"kubernetes.io/metadata.name": "monitoring"}, {"app.kubernetes.io/name": "prometheus"}),
    (("networkPolicy.scraperPodLabels=null",), {}, None),  # every pod of every namespace
    (("networkPolicy.scraperNamespaceLabels=null", "networkPolicy.scraperPodLabels=null"), None, None),  # no scraper
])
def test_scraper_values_reach_the_operator_as_given(values, namespaces, pods):
    """{} passes on as "every", null (Helm drops the key) as the operator's null, not its default."""
    cm = by_kind(template(*values), "ConfigMap")[0]
    netpol = OperatorConfig.model_validate(yaml.safe_load(cm["data"]["config.yaml"])).network_policy
    assert (netpol.scraper_namespace_labels, netpol.scraper_pod_labels) == (namespaces, pods)


def test_namespaced_mode_uses_roles_per_namespace():
    docs = template("watch.allNamespaces=false", "watch.namespaces={team-a,team-b}")
    roles = [r for r in by_kind(docs, "Role") if not r["metadata"]["name"].endswith("-leader")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    cluster_rules = by_kind(docs, "ClusterRole")[0]["rules"]
    # cluster-wide: read-only, and pods only so that the planner sees other namespaces' GPUs; the
    # one cluster-wide write is the operator's own cluster-scoped record, the NodeQuarantine
    assert cluster_rules == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
                             {"apiGroups": ["phalanx.dev"], "resources": ["nodequarantines"],
                              "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
                             {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list", "watch"]},
                             {"apiGroups": ["kueue.x-k8s.io"], "resources": ["topologies"], "verbs": ["list"]},
                             {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
                             {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    args = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--all-namespaces" not in args


def test_namespaced_mode_without_namespaces_fails_clearly():
    res = subprocess.run([helm(), "template", "rel", str(CHART), "--set", "watch.allNamespaces=false"], capture_output=True, text=True)
    assert res.returncode != 0
    assert "watch.namespaces must list at least one namespace" in res.stderr


def test_rbac_is_least_privilege():
    rules = by_kind(template(), "ClusterRole")[0]["rules"]
    flat = {(g, r): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert flat[("", "pods")] == {"get", "list", "watch", "create", "delete", "patch"}
    assert flat[("", "services")] == {"get", "list", "watch", "create"}
    assert flat[("", "configmaps")] == {"get", "list", "watch", "create", "patch"}
    assert flat[("phalanx.dev", "trainingjobs/status")] == {"get", "patch"}
    assert flat[("", "nodes")] == {"list", "watch"}
    assert flat[("kueue.x-k8s.io", "topologies")] == {"list"}  # topology preset auto/kueue, at start-up
    assert flat[("", "namespaces")] == {"list", "watch"}
    assert flat[("", "resourcequotas")] == {"list", "watch"}  # read only: is there room for a whole gang
    assert flat[("networking.k8s.io", "networkpolicies")] == {"get", "list", "watch", "create"}
    # the workload backend creates its Workload and PodGroup and reads the PodGroup's status
    assert flat[("scheduling.k8s.io", "workloads")] == flat[("scheduling.k8s.io", "podgroups")] == {"get", "create"}
    for verbs in flat.values():
        assert "*" not in verbs and "update" not in verbs and "escalate" not in verbs
    assert ("", "secrets") not in flat


def test_lease_rbac_is_one_named_lease_in_the_release_namespace():
    docs = template()
    assert not any("leases" in rule["resources"] for r in by_kind(docs, "ClusterRole") for rule in r["rules"])
    (role,) = [r for r in by_kind(docs, "Role") if any("leases" in rule["resources"] for rule in r["rules"])]
    assert role["metadata"]["namespace"] == "phalanx-system"
    assert role["rules"] == [  # create cannot be limited by name; get/update only the operator's lease
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["rel-operator-leader"],
         "verbs": ["get", "update"]}]
    (binding,) = [b for b in by_kind(docs, "RoleBinding") if b["roleRef"]["name"] == role["metadata"]["name"]]
    assert binding["metadata"]["namespace"] == "phalanx-system"
    assert binding["subjects"][0]["name"] == by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["serviceAccountName"]


def test_crd_ships_with_chart():
    crd = yaml.safe_load((CHART / "crds" / "phalanx.dev_trainingjobs.yaml").read_text())
    assert crd["spec"]["names"]["shortNames"] == ["tj"]


def test_service_monitor_optional():
    assert not by_kind(template(), "ServiceMonitor")
    sm = by_kind(template("metrics.serviceMonitor.enabled=true"), "ServiceMonitor")[0]
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"


def _token_kubeconfig(admin_kubeconfig, token: str, path) -> None:
    cfg = yaml.safe_load(open(admin_kubeconfig).read())
    cfg["users"] = [{"name": "sa", "user": {"token": token}}]
    cfg["contexts"] = [{"name": "sa", "context": {"cluster": cfg["clusters"][0]["name"], "user": "sa"}}]
    cfg["current-context"] = "sa"
    path.write_text(yaml.safe_dump(cfg))


@pytest.mark.parametrize("mode", ["all-namespaces", "namespaced"])
def test_helm_install_and_operator_runs_with_the_charts_rbac(cluster, crd, operator, api, namespace, tmp_path, mode):
    """helm install onto the cluster, then run the operator exactly as the Deployment does (leader
    election included), with the chart's ServiceAccount token: a job must go all the way to
    Succeeded (RBAC is sufficient), in both modes."""
    from localcluster import finish_pod
    from tests.integration.harness import Jobs, OperatorProcess, job_manifest, wait_for

    release, ns = f"rbac-{namespace[-6:]}", f"{namespace}-sys"
    scope = ["--set", "watch.allNamespaces=false", "--set", f"watch.namespaces={{{namespace}}}"] if mode == "namespaced" else []
    install = subprocess.run([helm(), "install", release, str(CHART), "-n", ns, "--create-namespace", *scope,
                              f"--kubeconfig={cluster.kubeconfig}", "--wait=false"], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    operator.stop()  # one operator at a time
    rbac_op = None
    try:
        deploy = json.loads(cluster.kubectl("get", "deploy", f"{release}-operator", "-n", ns, "-o", "json").stdout)
        args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:1] == ["operator"] and ("--all-namespaces" in args) == (mode == "all-namespaces")
        namespaces = [a.split("=", 1)[1] for a in args if a.startswith("--namespace=")]
        leader_args = [a for a in args if a.startswith("--leader-elect")] + [f"--leader-elect-namespace={ns}"]  # POD_NAMESPACE in the pod
        config = yaml.safe_load(json.loads(cluster.kubectl("get", "cm", f"{release}-operator-config", "-n", ns, "-o", "json").stdout)["data"]["config.yaml"])
        token = cluster.kubectl("create", "token", f"{release}-operator", "-n", ns).stdout.strip()
        kubeconfig = tmp_path / "sa-kubeconfig"
        _token_kubeconfig(cluster.kubeconfig, token, kubeconfig)
        rbac_op = OperatorProcess(kubeconfig, tmp_path, config=config, namespaces=namespaces, extra_args=leader_args).start()
        wait_for(lambda: "acquired leadership" in rbac_op.log.read_text(), 30, "the lease, with the chart's Role")
        jobs = Jobs(api, namespace)
        jobs.create(job_manifest("rbac", nodes=2))
        pods = wait_for(lambda: len(p := jobs.pods("rbac")) == 2 and all(x.status.phase == "Running" for x in p) and p, 90, "Running")
        jobs.wait_phase("rbac", "Running")
        for pod in pods:
            finish_pod(cluster.kubeconfig, namespace, pod.metadata.name, 0)
        jobs.wait_phase("rbac", "Succeeded", 60)
        wait_for(lambda: any(e.reason == "Succeeded" for e in jobs.events("rbac")), 30, "event posted with the SA")
        jobs.delete("rbac")  # kopf's finalizer comes off with the chart's RBAC too
        wait_for(lambda: not [j for j in jobs.custom.list_namespaced_custom_object("phalanx.dev", "v1alpha1", namespace, "trainingjobs")["items"]],
                 30, "the job gone")
        assert "forbidden" not in rbac_op.tail(400).lower(), rbac_op.tail(40)
    finally:
        if rbac_op:
            rbac_op.stop()
        operator.start()
        subprocess.run([helm(), "uninstall", release, "-n", ns, f"--kubeconfig={cluster.kubeconfig}"], capture_output=True)
        cluster.kubectl("delete", "ns", ns, "--wait=false", check=False)


@pytest.mark.parametrize(("value", "words"), [
    ("policy.default.allowSecrets=yes", "got string, want boolean"),
    ("policy.default.alowSecrets=true", "additional properties 'alowSecrets' not allowed"),
    ("networkProfiles.ib.fabric=fiber", "value must be one of"),
    ("podCreateConcurrency=0", "minimum"),
])
def test_values_schema_refuses_bad_values(value, words):
    res = subprocess.run([helm(), "template", "rel", str(CHART), "--set", value], capture_output=True, text=True)
    assert res.returncode != 0 and words in res.stderr, res.stderr


def test_notes_say_what_jobs_may_ask_for(cluster):
    res = subprocess.run([helm(), "install", "--dry-run=client", "rel", str(CHART), "-n", "phalanx-system"],
                         capture_output=True, text=True, env={"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin"})
    assert "What a TrainingJob may ask for" in res.stdout and "Secrets: refused" in res.stdout, res.stdout + res.stderr


def _runtime_image(*sets: str) -> str | None:
    cm = by_kind(template(*sets), "ConfigMap")[0]
    return yaml.safe_load(cm["data"]["config.yaml"]).get("runtimeImage")


def test_runtime_image_sits_beside_the_operator_image_unless_named():
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert _runtime_image() == f"phalanx/runtime:{version}"
    assert _runtime_image("image.repository=reg.example.com/ml/phalanx/operator") == \
        f"reg.example.com/ml/phalanx/runtime:{version}"
    assert _runtime_image("image.repository=reg.example.com/ml/phalanx/operator",
                          "runtime.image.repository=reg.example.com/ml/phalanx/runtime-deepspeed",
                          "runtime.image.tag=v2") == "reg.example.com/ml/phalanx/runtime-deepspeed:v2"
    # an operator image named otherwise: no guess, every job names its image
    assert _runtime_image("image.repository=reg.example.com/ml/my-operator-build") is None
