"""checkpoint.storage (object storage): what the pods get, what is refused at validation, and the
cluster policy's grants ({namespace}: each namespace its own prefix)."""

from __future__ import annotations

import copy

import pytest

from phalanx import constants
from phalanx.api.config import OperatorConfig
from phalanx.api.policy import ClusterPolicy, PolicyRules, StorageGrant
from phalanx.render.job import render_children
from phalanx.validate import validate_job
from tests.conftest import MINIMAL

ENDPOINT = "http://seaweedfs.storage.svc:8333"
GRANTS = PolicyRules(allowed_checkpoint_storage=[
    StorageGrant(uri="s3://ckpt/{namespace}", endpoint=ENDPOINT, credentials_secrets=["ckpt-s3"]),
    StorageGrant(uri="gs://team-models/shared"),
])
CONFIG = OperatorConfig(policy=ClusterPolicy(default=GRANTS))


def job(checkpoint: dict, namespace: str = "team") -> dict:
    obj = copy.deepcopy(MINIMAL)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["checkpoint"] = checkpoint
    return obj


def problems(obj, config=CONFIG) -> list[str]:
    return [str(p) for p in validate_job(obj, config)[1]]


def pod(obj, config=CONFIG) -> dict:
    parsed, found = validate_job(obj, config)
    assert not found, found
    return next(c for c in render_children(parsed, config, attempt=0) if c["kind"] == "Pod")


def env_of(p: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in p["spec"]["containers"][0]["env"]}


S3 = {"storage": {"uri": "s3://ckpt/team/runs", "endpoint": ENDPOINT, "region": "us-east-1",
                  "credentialsSecret": "ckpt-s3"}, "intervalSteps": 50}


def test_s3_storage_env_and_a_pod_local_checkpoint_dir():
    p = pod(job(S3))
    env = env_of(p)
    assert env[constants.ENV_CHECKPOINT_URI] == "s3://ckpt/team/runs/team/job"
    assert env[constants.ENV_CHECKPOINT_DIR] == "/checkpoints/team/job"
    assert env["AWS_ENDPOINT_URL_S3"] == ENDPOINT and env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "ckpt-s3", "key": "AWS_ACCESS_KEY_ID"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "ckpt-s3", "key": "AWS_SECRET_ACCESS_KEY"}}
    assert env["AWS_SESSION_TOKEN"] == {"secretKeyRef": {"name": "ckpt-s3", "key": "AWS_SESSION_TOKEN", "optional": True}}
    volumes = {v["name"]: v for v in p["spec"]["volumes"]}
    assert volumes[constants.VOLUME_CHECKPOINT] == {"name": constants.VOLUME_CHECKPOINT, "emptyDir": {}}
    mounts = {m["name"]: m["mountPath"] for m in p["spec"]["containers"][0]["volumeMounts"]}
    assert mounts[constants.VOLUME_CHECKPOINT] == "/checkpoints"


def test_gs_storage_mounts_the_key_file_and_no_secret_means_the_pods_identity():
    with_key = pod(job({"storage": {"uri": "gs://team-models/shared/x", "credentialsSecret": "gcs-key"}},),
                   OperatorConfig(policy=ClusterPolicy(default=PolicyRules(allowed_checkpoint_storage=[
                       StorageGrant(uri="gs://team-models/shared", credentials_secrets=["gcs-key"])]))))
    env = env_of(with_key)
    assert env[constants.ENV_GOOGLE_APPLICATION_CREDENTIALS] == "/phalanx/storage-credentials/key.json"
    assert not any(k.startswith("AWS_") for k in env)
    vol = next(v for v in with_key["spec"]["volumes"] if v["name"] == constants.VOLUME_STORAGE_CREDENTIALS)
    assert vol["secret"] == {"secretName": "gcs-key", "items": [{"key": "key.json", "path": "key.json"}]}
    identity = env_of(pod(job({"storage": {"uri": "gs://team-models/shared"}})))
    assert identity[constants.ENV_CHECKPOINT_URI] == "gs://team-models/shared/team/job"
    assert not any(k.startswith(("AWS_", "GOOGLE_")) for k in identity)


def test_a_job_without_storage_gets_no_uri():
    env = env_of(pod(job({"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}})))
    assert constants.ENV_CHECKPOINT_URI not in env and env[constants.ENV_CHECKPOINT_DIR] == "/checkpoints/team/job"


@pytest.mark.parametrize("checkpoint,field,words", [
    ({"storage": {"uri": "s3://ckpt/team"}, "volume": {"persistentVolumeClaim": {"claimName": "c"}}},
     "spec.checkpoint.storage", "not both"),
    ({"storage": {"uri": "s3://ckpt/team"}, "exportHuggingFace": True}, "spec.checkpoint.exportHuggingFace", "needs checkpoint.volume"),
    ({"storage": {"uri": "gs://team-models/shared", "endpoint": ENDPOINT}}, "spec.checkpoint.storage.endpoint", "s3:// storage"),
    ({"storage": {"uri": "gs://team-models/shared", "region": "eu"}}, "spec.checkpoint.storage.region", "s3:// storage"),
    ({"storage": {"uri": "s3://ckpt/team/../other"}}, "spec.checkpoint.storage.uri", "s3://<bucket>/<prefix>"),
    ({"storage": {"uri": "s3://ckpt/team/"}}, "spec.checkpoint.storage.uri", "no trailing '/'"),
    ({"storage": {"uri": "https://ckpt/team"}}, "spec.checkpoint.storage.uri", "s3://<bucket>/<prefix>"),
    ({"storage": {"uri": "s3://ckpt/team", "endpoint": "https://host/path"}}, "spec.checkpoint.storage.endpoint", "no path"),
    ({"storage": {"endpoint": ENDPOINT}}, "spec.checkpoint.storage.uri", ""),
    ({"intervalSteps": 10}, "spec.checkpoint.intervalSteps", "needs checkpoint.volume or checkpoint.storage"),
])
def test_refused_naming_the_field(checkpoint, field, words):
    found = problems(job(checkpoint))
    assert any(p.startswith(field) and words in p for p in found), found


@pytest.mark.parametrize("namespace,storage,field", [
    ("team", {"uri": "s3://ckpt/team", "endpoint": ENDPOINT}, None),
    ("team", {"uri": "s3://ckpt/team/a/b", "endpoint": ENDPOINT, "credentialsSecret": "ckpt-s3"}, None),
    ("other", {"uri": "s3://ckpt/other/x", "endpoint": ENDPOINT}, None),
    ("team", {"uri": "gs://team-models/shared/run"}, None),
    # another namespace's prefix, a sibling prefix, the bucket above the grant
    ("team", {"uri": "s3://ckpt/other/x", "endpoint": ENDPOINT}, "spec.checkpoint.storage.uri"),
    ("team", {"uri": "s3://ckpt/team-b", "endpoint": ENDPOINT}, "spec.checkpoint.storage.uri"),
    ("team", {"uri": "s3://ckpt", "endpoint": ENDPOINT}, "spec.checkpoint.storage.uri"),
    # the grant's endpoint and no other; its Secrets and no other
    ("team", {"uri": "s3://ckpt/team"}, "spec.checkpoint.storage.endpoint"),
    ("team", {"uri": "s3://ckpt/team", "endpoint": "http://other:8333"}, "spec.checkpoint.storage.endpoint"),
    ("team", {"uri": "s3://ckpt/team", "endpoint": ENDPOINT, "credentialsSecret": "admin"}, "spec.checkpoint.storage.credentialsSecret"),
    ("team", {"uri": "gs://team-models/shared", "credentialsSecret": "ckpt-s3"}, "spec.checkpoint.storage.credentialsSecret"),
])
def test_grants(namespace, storage, field):
    found = [p for p in problems(job({"storage": storage}, namespace)) if p.startswith("spec.checkpoint.storage")]
    if field is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(field + ":"), found
        assert f"s3://ckpt/{namespace}/..." in found[0], found  # the namespace's own prefix, spelled out


def test_no_grant_no_object_storage():
    found = problems(job({"storage": {"uri": "s3://ckpt/team"}}), OperatorConfig())
    assert any(p.startswith("spec.checkpoint.storage:") and "allowedCheckpointStorage is empty" in p for p in found), found


def test_a_grant_uri_is_checked():
    with pytest.raises(ValueError, match="namespace"):
        StorageGrant(uri="s3://ckpt/../{namespace}")
    assert StorageGrant(uri="s3://ckpt/{namespace}/").uri == "s3://ckpt/{namespace}"


def test_the_local_tier_is_the_pods_emptydir_as_the_job_sizes_it():
    checkpoint = {"storage": {"uri": "s3://ckpt/team", "endpoint": ENDPOINT,
                              "localTier": {"medium": "Memory", "sizeLimit": "32Gi"}}}
    volumes = {v["name"]: v for v in pod(job(checkpoint))["spec"]["volumes"]}
    assert volumes[constants.VOLUME_CHECKPOINT]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    found = problems(job({"storage": {"uri": "s3://ckpt/team", "endpoint": ENDPOINT, "localTier": {"medium": "Disk"}}}))
    assert any(p.startswith("spec.checkpoint.storage.localTier.medium") for p in found), found
