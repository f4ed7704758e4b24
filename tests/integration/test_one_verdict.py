"""One verdict: every manifest of the corpus goes to the real API server
(dry-run, strict field validation, as `kubectl apply --dry-run=server` sends it) and to
`phalanx validate`; they must agree. Then every job validate accepts renders children the API
server accepts (dry-run of each kind), so no accepted job can fail at pod creation."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx.api.config import OperatorConfig
from phalanx.lifecycle.refusals import is_permanent
from phalanx.render.job import render_children
from phalanx.validate import validate_job
from tests.corpus import corpus
from tests.integration.harness import GROUP, PLURAL, RUNTIME_IMAGE, VERSION

CORPUS = corpus()


def server_verdict(custom: client.CustomObjectsApi, namespace: str, obj: dict) -> str | None:
    """None when the API server accepts the object, else its message."""
    body = copy.deepcopy(obj)
    if isinstance(body.get("metadata"), dict):
        body["metadata"]["namespace"] = namespace
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, dry_run="All", field_validation="Strict")
    except ApiException as exc:
        try:
            return json.loads(exc.body).get("message") or str(exc.status)
        except (TypeError, ValueError):
            return f"{exc.status} {exc.reason}"
    except ValueError as exc:  # the client cannot even send it (NaN)
        return str(exc)
    return None


def test_corpus_is_large_and_mixed():
    verdicts = [bool(validate_job(copy.deepcopy(o))[1]) for _, o in CORPUS]
    assert len(CORPUS) >= 350 and 0.2 < sum(verdicts) / len(verdicts) < 0.9


def test_validate_agrees_with_the_api_server(cluster, crd, api, namespace):
    custom = client.CustomObjectsApi(api)
    disagreements = []
    for name, obj in CORPUS:
        _, problems = validate_job(copy.deepcopy(obj))
        ours = [str(p) for p in problems if p.source == "api"]  # what we say the API server refuses
        theirs = server_verdict(custom, namespace, obj)
        # ours ⊆ theirs ⊆ all we refuse: the operator's own rules may refuse more, never less.
        if bool(ours) and theirs is None or theirs is not None and not problems:
            said = [str(p) for p in problems]
            disagreements.append(f"{name}: phalanx says {said or 'valid'}; the API server says {theirs or 'valid'}\n  {json.dumps(obj)[:600]}")
    assert not disagreements, f"{len(disagreements)} of {len(CORPUS)} disagree:\n" + "\n".join(disagreements[:15])


def test_every_accepted_job_renders_children_the_api_server_accepts(cluster, api, namespace):
    core = client.CoreV1Api(api)
    create = {"Pod": core.create_namespaced_pod, "Service": core.create_namespaced_service,
              "ConfigMap": core.create_namespaced_config_map}
    config, refused, checked = OperatorConfig(runtime_image=RUNTIME_IMAGE), [], 0
    for name, obj in CORPUS:
        obj = copy.deepcopy(obj)
        obj["metadata"]["namespace"] = namespace
        job, problems = validate_job(obj, config)
        if problems:
            continue
        job.metadata.uid = "00000000-0000-0000-0000-000000000001"
        seen = set()
        for child in render_children(job, config, attempt=0):
            if child["kind"] not in create or child["kind"] in seen:
                continue
            seen.add(child["kind"])
            try:
                create[child["kind"]](namespace, child, dry_run="All")
            except ApiException as exc:
                message = json.loads(exc.body).get("message", "")
                if is_permanent(exc.status, message):
                    refused.append(f"{name}: {child['kind']}: {message}")
        checked += 1
    assert checked >= 50
    assert not refused, "\n".join(refused[:10])


@pytest.mark.parametrize("quantity", ["lots", "-1", "64GB"])
def test_bad_quantity_refused_at_apply(cluster, crd, tmp_path, namespace, quantity):
    from tests.corpus import BASE

    obj = copy.deepcopy(BASE)
    obj["spec"]["resources"] = {"memory": quantity}
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(obj))
    out = cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    assert out.returncode != 0
    assert "spec.resources.memory" in out.stderr and "non-negative quantity" in out.stderr, out.stderr
