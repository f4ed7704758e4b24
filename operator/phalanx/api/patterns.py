"""Name, path and quantity formats of the Kubernetes API, as regular expressions that mean the
same in the API server (Go RE2, CRD `pattern` and CEL `matches`) and in pydantic (Rust regex).
Each is anchored: a value matches whole or not at all (no trailing newline slips through)."""

from __future__ import annotations

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"

# DNS-1123 label (63) and subdomain (253): Services, volumes, service accounts, classes.
DNS_LABEL = rf"^{_LABEL}$"
DNS_SUBDOMAIN = rf"^{_LABEL}(\.{_LABEL})*$"
# DNS-1035 label: TrainingJob names become Service names and pod hostnames.
JOB_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Label and annotation keys, topology keys: [prefix/]name.
QUALIFIED_NAME = rf"^({_LABEL}(\.{_LABEL})*/)?{_NAME_PART}$"
LABEL_VALUE = rf"^({_NAME_PART})?$"
# Container env names (Kubernetes' relaxed rule) and shell-safe names for ncclEnv.
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
C_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A non-negative resource quantity ("8", "500m", "64Gi", "1e3"); negative ones are never valid
# requests, and "64GB" is not a quantity at all.
QUANTITY = (r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
            r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
# Extended, hugepages and ephemeral-storage resource names (cpu/memory/GPUs have fields).
RESOURCE_NAME = rf"^(ephemeral-storage|hugepages-[0-9]+[KMGTPE]?i?|{_LABEL}(\.{_LABEL})*/{_NAME_PART})$"
# An OCI image reference: [registry[:port]/]path[:tag][@digest], no whitespace.
IMAGE = (r"^([a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?(:[0-9]+)?/)?"
         r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
         r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
         r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
# An absolute path below "/" whose segments are neither "." nor "..".
ABSOLUTE_PATH = r"^(/([^/\x00]*[^/.\x00][^/\x00]*|\.\.\.+))+/?$"

# Lengths that go with the formats above.
MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253
MAX_QUALIFIED_NAME = 317  # 253 prefix + "/" + 63
MAX_LABEL_VALUE = 63

# Object storage (checkpoint.storage): a bucket (S3's and GCS's rules: 3-63 lower-case letters, digits,
# '.', '-', and '_' for GCS) and key segments that are neither empty nor '.'/'..'; no trailing '/'.
_URI_SEGMENT = r"[-A-Za-z0-9_.=+@,]*[-A-Za-z0-9_=+@,][-A-Za-z0-9_.=+@,]*"
STORAGE_URI = rf"^(s3|gs)://[a-z0-9][-a-z0-9._]{{1,61}}[a-z0-9](/{_URI_SEGMENT})*$"
ENDPOINT_URL = r"^https?://[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$"
REGION = r"^[a-z0-9]([-a-z0-9]{0,62}[a-z0-9])?$"

# What each format means, in the words an error message uses ("... must be <description>").
DESCRIPTIONS = {
    DNS_LABEL: "a DNS-1123 label (lower-case letters, digits and '-', alphanumeric at both ends, at most 63)",
    DNS_SUBDOMAIN: "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', alphanumeric at both ends)",
    JOB_NAME: "a DNS-1035 label (lower-case letters, digits, '-', starting with a letter)",
    QUALIFIED_NAME: "a label key ([prefix/]name: alphanumerics, '-', '_', '.'; name at most 63)",
    LABEL_VALUE: "a label value (alphanumerics, '-', '_', '.', alphanumeric at both ends, at most 63)",
    ENV_NAME: "an environment variable name (letters, digits, '-', '.', '_'; not starting with a digit)",
    C_IDENTIFIER: "an environment variable name (letters, digits and '_', not starting with a digit)",
    QUANTITY: "a non-negative quantity such as 8, 500m, 64Gi or 1e3 (64GB is not one: use 64G or 64Gi)",
    RESOURCE_NAME: "an extended resource name (domain/name), hugepages-<size> or ephemeral-storage",
    IMAGE: "an image reference like registry.example.com:5000/team/runtime:v1 (no spaces, lower-case path)",
    ABSOLUTE_PATH: "an absolute path below / without '.' or '..' segments",
    STORAGE_URI: "s3://<bucket>/<prefix> or gs://<bucket>/<prefix> (bucket: 3-63 lower-case letters, digits, "
                 "'.', '-', '_'; no empty, '.' or '..' segment, no trailing '/')",
    ENDPOINT_URL: "an http:// or https:// URL of a host and optional port, no path (e.g. https://s3.example.com:8333)",
    REGION: "a region name such as us-east-1 (lower-case letters, digits and '-')",
}
