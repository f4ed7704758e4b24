"""The cluster policy on the real API server (issues #12, #29): the chart's ValidatingAdmissionPolicy
refuses every hostile TrainingJob and TrainingSweep of tests/policy_cases.py at apply with the
rule's words (the env rules: the CRD's CEL), and admits every harmless one; where it does not apply,
the operator refuses them before creating anything; the examples are accepted, and their pods
admitted, in a namespace that enforces `restricted`."""

from __future__ import annotations

import copy
import json
import subprocess
import uuid

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx.api.config import OperatorConfig
from phalanx.render.job import render_children
from phalanx.validate import validate_job
from tests.corpus import examples
from tests.integration.harness import GROUP, PLURAL, RUNTIME_IMAGE, VERSION, Jobs, wait_for
from tests.integration.test_chart import CHART, helm
from tests.policy_cases import ENTRIES, HARMLESS, HOSTILE, Case, manifest

SWEEPS = "trainingsweeps"
KEY = "phalanx.dev/policy-test"
BY_NAME = {c.name: c for c in HOSTILE}
CONFIG = OperatorConfig(runtime_image=RUNTIME_IMAGE)  # as the chart installs it


@pytest.fixture(scope="module")
def policy(cluster):
    """The chart's policies, one entry per ENTRIES key, each bound to namespaces with this label
    and its own value; a value the entry leaves out takes the chart's default."""
    # A letter first and --set-string: an all-digit hex value would reach helm as a number.
    run = "t" + uuid.uuid4().hex[:8]
    args = [helm(), "template", "pol", str(CHART), "-n", "phalanx-system"]
    labels = {}
    for i, (entry, rules) in enumerate(ENTRIES.items()):
        labels[entry] = {KEY: f"{run}-{entry}"}
        args += ["--set-string", f"policy.namespaces[{i}].matchLabels.phalanx\\.dev/policy-test={run}-{entry}",
                 "--set-json", f"policy.namespaces[{i}].rules=" + json.dumps(rules.model_dump(by_alias=True, mode="json", exclude_defaults=True))]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d and "-policy-" in d["metadata"]["name"] and not d["metadata"]["name"].endswith("-default")]
    assert {d["kind"] for d in docs} == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    text = "\n---\n".join(json.dumps(d) for d in docs)
    subprocess.run([cluster.kubectl_bin, f"--kubeconfig={cluster.kubeconfig}", "apply", "--server-side",
                    "--force-conflicts", "-f", "-"], input=text, text=True, check=True, capture_output=True)
    yield labels
    for d in docs:
        cluster.kubectl("delete", d["kind"].lower(), d["metadata"]["name"], "--ignore-not-found", check=False)


def _create(custom, ns, obj, dry_run=False):
    body = {**obj, "metadata": {**obj["metadata"], "namespace": ns}}
    plural = SWEEPS if obj["kind"] == "TrainingSweep" else PLURAL
    return custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body, **({"dry_run": "All"} if dry_run else {}))


def _refusal(api, namespace, case: Case) -> str | None:
    """The API server's message if it refuses the case (dry run), else None."""
    try:
        _create(client.CustomObjectsApi(api), namespace, manifest(case), dry_run=True)
    except ApiException as exc:
        return json.loads(exc.body)["message"]
    return None


def _under(api, namespace, policy, entry: str) -> None:
    """Label the namespace for ``entry`` and wait until its policy answers (the binding and the
    namespace's labels reach the admission plugin a moment after they are written)."""
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": policy[entry]}})
    probe = next(c for c in HOSTILE if c.entry == entry and c.source == "policy" and c.sweep is None)
    wait_for(lambda: probe.words in (_refusal(api, namespace, probe) or ""), 20, f"policy {entry} active")


@pytest.mark.parametrize("name", [c.name for c in HOSTILE])
def test_refused_at_apply_with_the_rules_words(cluster, crd, api, namespace, policy, name):
    case = BY_NAME[name]
    _under(api, namespace, policy, case.entry)
    message = _refusal(api, namespace, case)
    assert message is not None and case.words in message, message
    if case.source != "crd":
        assert "ValidatingAdmissionPolicy" in message, message


@pytest.mark.parametrize("case", HARMLESS, ids=[c.name for c in HARMLESS])
def test_harmless_admitted(cluster, crd, api, namespace, policy, case):
    _under(api, namespace, policy, case.entry)
    assert _refusal(api, namespace, case) is None


def test_without_the_policy_the_operator_refuses_before_creating_anything(api, namespace, operator):
    jobs = Jobs(api, namespace)
    jobs.create(manifest(BY_NAME["socket"]))
    status = jobs.wait_phase("socket", "Failed", 30)
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert valid["reason"] == "InvalidSpec" and "spec.volumes[0]: hostPath volumes are not allowed here" in valid["message"]
    assert "(cluster policy)" in valid["message"] and jobs.pods("socket") == []


@pytest.mark.parametrize(("name", "obj"), examples(), ids=[n for n, _ in examples()])
def test_examples_accepted_and_pods_admitted_under_restricted(api, crd, namespace, name, obj):
    core = client.CoreV1Api(api)
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    _create(client.CustomObjectsApi(api), namespace, obj, dry_run=True)
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    job, problems = validate_job(obj, CONFIG, labels)
    assert problems == []
    job.metadata.uid = "00000000-0000-0000-0000-000000000002"
    pod = next(c for c in render_children(job, CONFIG, attempt=0) if c["kind"] == "Pod")
    prio = job.spec.scheduling.priority_class_name
    if prio:
        try:
            client.SchedulingV1Api(api).create_priority_class({"metadata": {"name": prio}, "value": 1000})
        except ApiException as exc:
            if exc.status != 409:
                raise
    core.create_namespaced_pod(namespace, pod, dry_run="All")  # Pod Security admission says yes


def test_a_job_stored_before_a_stricter_policy_stays_manageable(cluster, crd, api, namespace, policy):
    """The policy looks at what a request writes to the spec: the operator can still update the
    metadata (finalizers, labels) of a job the policy would now refuse; a spec change is refused."""
    custom = client.CustomObjectsApi(api)
    nfs = manifest(BY_NAME["nfs"])
    _create(custom, namespace, nfs)  # no policy binds the namespace yet
    _under(api, namespace, policy, "strict")
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "nfs", {"metadata": {"labels": {"seen": "yes"}}})
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "nfs", {"spec": {"suspend": True}})
    assert "spec.volumes: a volume type" in json.loads(refused.value.body)["message"]
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "nfs")
