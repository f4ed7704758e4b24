"""Structural schemas of the core/v1 types a TrainingJob embeds: every VolumeSource member and
every EnvVarSource member, generated from the Kubernetes API's own OpenAPI (v3) for the version
hack/cluster/go.mod pins, into operator/phalanx/api/kube_schemas.json. That file is committed:
`make crds` and the operator read it and need no Go.

    python3 hack/kube_schemas.py          # rewrite the data file from the Go module cache
    python3 hack/kube_schemas.py --check  # exit 1 when the data file differs from what it would write

On the way every $ref/allOf is inlined into a structural schema (a type on every node, no
$ref/allOf/oneOf/anyOf), and:
- descriptions and `x-kubernetes-list-type: atomic` (a CRD's default) are dropped (CRD size), so are defaults (the API server applies its own when the
  operator creates the pod; a CRD default would change what is stored) and patch strategies;
- resource.Quantity becomes int-or-string with controller-gen's quantity pattern and a length
  bound, IntOrString int-or-string with a length bound;
- ObjectMeta (ephemeral.volumeClaimTemplate.metadata) keeps only labels and annotations, the only
  fields the API server allows in a template;
- any other free-form node (an object with neither properties nor additionalProperties, FieldsV1,
  RawExtension) or a keyword not handled here stops the generator: none is reached in 1.36, and a
  new Kubernetes version must not slip one in unbounded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "operator/phalanx/api/kube_schemas.json"
GO_MOD = ROOT / "hack/cluster/go.mod"
SPEC = "api/openapi-spec/v3/api__v1_openapi.json"

CORE = "io.k8s.api.core.v1."
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
# controller-gen's pattern for resource.Quantity (the API server parses the same grammar).
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
SPECIAL: dict[str, dict[str, Any]] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity":
        {"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN, "maxLength": 64},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"x-kubernetes-int-or-string": True, "maxLength": 253},
    META + "ObjectMeta": {"type": "object", "properties": {"labels": STRING_MAP, "annotations": STRING_MAP}},
    META + "Time": {"type": "string", "format": "date-time"},
}
DROP = {"description", "default", "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key", "example"}
KEEP = {"type", "format", "enum", "required", "x-kubernetes-map-type", "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys", "minimum", "maximum", "maxLength", "maxItems", "maxProperties"}
FORMATS = {"int32", "int64", "double", "float", "byte", "date-time"}


def module_version(go_mod: Path = GO_MOD) -> str:
    """The k8s.io/kubernetes version hack/cluster/go.mod requires."""
    found = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", go_mod.read_text(), re.M)
    if not found:
        raise SystemExit(f"{go_mod}: no k8s.io/kubernetes requirement")
    return found.group(1)


def mod_cache() -> Path:
    """The Go module cache: $GOMODCACHE, else `go env GOMODCACHE`, else ~/go/pkg/mod."""
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    try:
        out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True, timeout=60)
        if out.stdout.strip():
            return Path(out.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return Path.home() / "go/pkg/mod"


def spec_path(version: str | None = None) -> Path:
    return mod_cache() / f"k8s.io/kubernetes@{version or module_version()}" / SPEC


def _ref_name(node: dict[str, Any]) -> str | None:
    ref = node.get("$ref")
    if ref is None and len(node.get("allOf", ())) == 1:
        ref = node["allOf"][0].get("$ref")
    return ref.rsplit("/", 1)[-1] if ref else None


def structural(node: dict[str, Any], schemas: dict[str, Any], where: str) -> dict[str, Any]:
    """``node`` as a structural schema: references inlined, only the keywords in KEEP."""
    name = _ref_name(node)
    if name is not None:
        extra = set(node) - {"$ref", "allOf"} - DROP
        if extra:
            raise ValueError(f"{where}: keywords {sorted(extra)} next to a reference")
        if name in SPECIAL:
            return json.loads(json.dumps(SPECIAL[name]))
        return structural(schemas[name], schemas, f"{where}<{name.rsplit('.', 1)[-1]}>")
    unknown = set(node) - KEEP - DROP - {"properties", "additionalProperties", "items"}
    if unknown:
        raise ValueError(f"{where}: keywords not handled: {sorted(unknown)}")
    out = {k: v for k, v in node.items() if k in KEEP}
    if out.get("x-kubernetes-list-type") == "atomic":
        del out["x-kubernetes-list-type"]  # a CRD's default: fewer bytes, same meaning
    if out.get("format") not in FORMATS:
        out.pop("format", None)
    kind = out.get("type")
    if kind == "object":
        props, extra = node.get("properties"), node.get("additionalProperties")
        if props:
            out["properties"] = {k: structural(v, schemas, f"{where}.{k}") for k, v in props.items()}
            required = [r for r in node.get("required", ()) if r in props]
            out.pop("required", None)
            if required:
                out["required"] = required
        elif isinstance(extra, dict):
            out["additionalProperties"] = structural(extra, schemas, f"{where}[*]")
        else:
            raise ValueError(f"{where}: a free-form object; bound it in SPECIAL")
    elif kind == "array":
        out["items"] = structural(node["items"], schemas, f"{where}[]")
    elif kind not in ("string", "integer", "number", "boolean"):
        raise ValueError(f"{where}: no type")
    return out


def _members(schemas: dict[str, Any], owner: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    props = schemas[CORE + owner]["properties"]
    return {m: structural(props[m], schemas, m) for m in sorted(props) if m not in skip}


def generate(openapi: dict[str, Any], version: str) -> dict[str, Any]:
    schemas = openapi["components"]["schemas"]
    return {
        "kubernetes": version,
        "source": f"k8s.io/kubernetes@{version}/{SPEC} (hack/kube_schemas.py)",
        "volumeSources": _members(schemas, "Volume", skip=("name",)),
        "envVarSources": _members(schemas, "EnvVarSource"),
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def expected_text(version: str | None = None) -> str:
    """What the data file should hold, from the Go module cache (FileNotFoundError without it)."""
    version = version or module_version()
    return render(generate(json.loads(spec_path(version).read_text()), version))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the data file is stale")
    args = parser.parse_args(argv)
    try:
        text = expected_text()
    except FileNotFoundError as exc:
        print(f"{exc.filename}: not in the Go module cache (cd hack/cluster && go mod download k8s.io/kubernetes)",
              file=sys.stderr)
        return 2
    if args.check:
        stale = not OUTPUT.exists() or OUTPUT.read_text() != text
        print(f"{OUTPUT.relative_to(ROOT)}: {'stale: run python3 hack/kube_schemas.py' if stale else 'up to date'}")
        return 1 if stale else 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
