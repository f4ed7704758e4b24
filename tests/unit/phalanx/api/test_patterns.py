"""The Kubernetes formats as regular expressions: each matches whole values only, and means what
its description says."""

from __future__ import annotations

import re
from typing import Annotated

import pytest
from pydantic import Field, TypeAdapter, ValidationError

from phalanx.api import patterns

CASES = [
    (patterns.DNS_LABEL, "a", True),
    (patterns.DNS_LABEL, "my-volume-1", True),
    (patterns.DNS_LABEL, "-a", False),
    (patterns.DNS_LABEL, "a-", False),
    (patterns.DNS_LABEL, "My", False),
    (patterns.DNS_LABEL, "a.b", False),
    (patterns.DNS_SUBDOMAIN, "a.b-c.d", True),
    (patterns.DNS_SUBDOMAIN, "a..b", False),
    (patterns.DNS_SUBDOMAIN, ".a", False),
    (patterns.JOB_NAME, "train-1", True),
    (patterns.JOB_NAME, "1train", False),  # DNS-1035: a letter first
    (patterns.QUALIFIED_NAME, "app", True),
    (patterns.QUALIFIED_NAME, "kubernetes.io/hostname", True),
    (patterns.QUALIFIED_NAME, "Node_Pool.x", True),
    (patterns.QUALIFIED_NAME, "Example.com/x", False),  # the prefix is a DNS subdomain
    (patterns.QUALIFIED_NAME, "a/b/c", False),
    (patterns.QUALIFIED_NAME, "x" * 64, False),
    (patterns.LABEL_VALUE, "", True),
    (patterns.LABEL_VALUE, "v1.2_rc-3", True),
    (patterns.LABEL_VALUE, "-v", False),
    (patterns.LABEL_VALUE, "a b", False),
    (patterns.ENV_NAME, "NCCL_DEBUG", True),
    (patterns.ENV_NAME, "my.var-1", True),
    (patterns.ENV_NAME, "1X", False),
    (patterns.ENV_NAME, "A=B", False),
    (patterns.C_IDENTIFIER, "_X1", True),
    (patterns.C_IDENTIFIER, "X-1", False),
    (patterns.QUANTITY, "8", True),
    (patterns.QUANTITY, "500m", True),
    (patterns.QUANTITY, "64Gi", True),
    (patterns.QUANTITY, "1e3", True),
    (patterns.QUANTITY, "+1.5", True),
    (patterns.QUANTITY, ".5", True),
    (patterns.QUANTITY, "64GB", False),
    (patterns.QUANTITY, "-1", False),
    (patterns.QUANTITY, "1 Gi", False),
    (patterns.QUANTITY, "Gi", False),
    (patterns.RESOURCE_NAME, "rdma/rdma_shared_device_a", True),
    (patterns.RESOURCE_NAME, "hugepages-2Mi", True),
    (patterns.RESOURCE_NAME, "ephemeral-storage", True),
    (patterns.RESOURCE_NAME, "cpu", False),  # has its own field
    (patterns.RESOURCE_NAME, "gpu", False),
    (patterns.IMAGE, "img:1", True),
    (patterns.IMAGE, "registry.example.com:5000/team/runtime:v1", True),
    (patterns.IMAGE, "ghcr.io/org/img@sha256:" + "a" * 64, True),
    (patterns.IMAGE, "team/Img", False),  # the path is lower-case
    (patterns.IMAGE, "img :1", False),
    (patterns.IMAGE, "", False),
    (patterns.ABSOLUTE_PATH, "/data", True),
    (patterns.ABSOLUTE_PATH, "/data/ckpt/", True),
    (patterns.ABSOLUTE_PATH, "/a/.hidden", True),
    (patterns.ABSOLUTE_PATH, "/...", True),
    (patterns.ABSOLUTE_PATH, "data", False),
    (patterns.ABSOLUTE_PATH, "/", False),
    (patterns.ABSOLUTE_PATH, "/a/../etc", False),
    (patterns.ABSOLUTE_PATH, "/a/./b", False),
    (patterns.ABSOLUTE_PATH, "/a//b", False),
    (patterns.STORAGE_URI, "s3://ckpt", True),
    (patterns.STORAGE_URI, "s3://ckpt/team-a/run.1", True),
    (patterns.STORAGE_URI, "gs://my_bucket/a/b", True),
    (patterns.STORAGE_URI, "s3://ckpt/", False),
    (patterns.STORAGE_URI, "s3://ckpt/../other", False),
    (patterns.STORAGE_URI, "s3://ckpt/./x", False),
    (patterns.STORAGE_URI, "s3://ckpt//x", False),
    (patterns.STORAGE_URI, "s3://ck", False),
    (patterns.STORAGE_URI, "s3://Ckpt/x", False),
    (patterns.STORAGE_URI, "file:///etc", False),
    (patterns.STORAGE_URI, "http://ckpt/x", False),
    (patterns.ENDPOINT_URL, "http://seaweedfs.storage.svc:8333", True),
    (patterns.ENDPOINT_URL, "https://s3.us-east-1.amazonaws.com", True),
    (patterns.ENDPOINT_URL, "https://s3.example.com/path", False),
    (patterns.ENDPOINT_URL, "ftp://s3.example.com", False),
    (patterns.ENDPOINT_URL, "https://user@s3.example.com", False),
    (patterns.REGION, "us-east-1", True),
    (patterns.REGION, "US-EAST-1", False),
]


@pytest.mark.parametrize(("pattern", "value", "matches"), CASES)
def test_format(pattern, value, matches):
    assert bool(re.fullmatch(pattern, value)) is matches
    # anchored: re.search finds no partial match where the whole value does not match
    assert bool(re.search(pattern, value)) is matches


# A path segment may hold any character but '/' and NUL, a newline included.
@pytest.mark.parametrize("pattern", [p for p in patterns.DESCRIPTIONS if p != patterns.ABSOLUTE_PATH])
def test_no_trailing_newline_slips_through_a_pydantic_field(pattern):
    """Python's ``$`` would match before a final newline; the field's regex (as the API server's)
    does not."""
    field = TypeAdapter(Annotated[str, Field(pattern=pattern)])
    valid = next(value for p, value, matches in CASES if p == pattern and matches and value)
    assert field.validate_python(valid) == valid
    with pytest.raises(ValidationError):
        field.validate_python(valid + "\n")


def test_every_format_is_anchored_and_described():
    formats = [value for name, value in vars(patterns).items() if name.isupper() and not name.startswith("_") and isinstance(value, str)]
    assert set(formats) == set(patterns.DESCRIPTIONS)
    assert all(value.startswith("^") and value.endswith("$") for value in formats)
