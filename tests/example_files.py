"""The example manifests (examples/*.yaml) and the TrainingJob / TrainingSweep snippets of README.md
and docs/*.md, as the example tests read them (tests/unit/test_examples.py offline,
tests/e2e/test_examples.py on kind).

**Header.** The comment lines an example file starts with hold exactly one line

    # Runs on kind: yes (how)           or           # Runs on kind: no — why

and, in a file with a TrainingJob or TrainingSweep, a ``# Needs: …`` line (continued by lines
starting ``#   ``) saying what a cluster must have for it: GPUs, PVCs, an image, free CPU and memory.
"yes" means `kubectl apply -f` of the file, unchanged, trains to Succeeded on the cluster of
``hack/kind-e2e.sh up`` (:func:`kind_blockers` says what would keep it off).

**Doc snippets.** Every ```yaml block of README.md and docs/*.md: its documents with apiVersion
``phalanx.dev/…`` are checked as they are; a block whose one document is a mapping with the single
key ``spec`` (a fragment) is wrapped into a TrainingJob named ``fragment`` (``spec.image`` added
when the fragment has none) and checked too. Other blocks (a PVC, a pod's env) are not ours.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from phalanx import __version__, constants
from phalanx.gang.inventory import parse_quantity

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CHART = ROOT / "charts" / "phalanx"

MARKER = re.compile(r"^# Runs on kind: (yes|no)\b(.*)$")
NEEDS = "# Needs:"
FENCE = re.compile(r"^```(yaml|yml)[^\n]*\n(.*?)^```", re.S | re.M)
OUR_KINDS = (constants.KIND, constants.SWEEP_KIND)

# What `hack/kind-e2e.sh up` has (hack/kind/up.sh): two workers of a few CPUs and GiB each, which
# also run the operator; the runtime image loaded; the PVC phalanx-shared; the chart's default
# values (network profile "default" only, no PriorityClass of ours).
KIND_WORKERS = 2
KIND_POD_CPU = Decimal(1)
KIND_POD_MEMORY = parse_quantity("4Gi")
KIND_IMAGE = f"phalanx/runtime:{__version__}"
KIND_PVCS = frozenset({"phalanx-shared"})
# Examples that an e2e test already runs from their file: tests/e2e/test_examples.py skips them.
RUN_ELSEWHERE = {"cpu-3d-demo.yaml": "tests/e2e/test_kind_e2e.py"}


@dataclass(frozen=True)
class Header:
    runs_on_kind: bool | None  # None: no marker line
    why: str  # the rest of the marker line
    needs: str  # the Needs lines, joined ("" when there are none)
    markers: int  # how many marker lines (exactly one is right)


def header(path: Path) -> Header:
    """The marker and Needs lines of the comment block ``path`` starts with."""
    block = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        block.append(line)
    found = [m for m in map(MARKER.match, block) if m]
    needs, inside = [], False
    for line in block:
        inside = line.startswith(NEEDS) or (inside and line.startswith("#   "))
        if inside:
            needs.append(line.removeprefix(NEEDS).lstrip("# ").strip())
    runs = found[0].group(1) == "yes" if found else None
    return Header(runs, found[0].group(2).strip() if found else "", " ".join(needs), len(found))


def documents(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def ours(doc: Any) -> bool:
    return isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith(f"{constants.GROUP}/") and doc.get("kind") in OUR_KINDS


def job_spec(doc: dict[str, Any]) -> dict[str, Any]:
    """A TrainingJob's spec, or a TrainingSweep's template spec."""
    spec = doc.get("spec") or {}
    return (spec.get("template") or {}).get("spec") or {} if doc.get("kind") == constants.SWEEP_KIND else spec


def kind_blockers(doc: Any) -> list[str]:
    """Why ``doc``, applied unchanged, cannot train to Succeeded on the kind cluster (empty: it can)."""
    if not ours(doc):
        return ["not a TrainingJob or TrainingSweep"]
    spec = job_spec(doc)
    out = []
    if spec.get("image", chart_operator_config().get("runtimeImage")) != KIND_IMAGE:  # none: the chart's
        out.append(f"image {spec.get('image')!r} is not loaded on kind (only {KIND_IMAGE})")
    if spec.get("nodes", 1) > KIND_WORKERS:
        out.append(f"{spec['nodes']} nodes; kind has {KIND_WORKERS} workers")
    for who, res in [("workers", spec.get("resources") or {})] + [
            (f"role {r.get('name')}", r.get("resources") or {}) for r in spec.get("roles", [])]:
        out += _resource_blockers(who, res)
    claims = [v.get("persistentVolumeClaim", {}).get("claimName")
              for v in [(spec.get("checkpoint") or {}).get("volume") or {}, *spec.get("volumes", [])]]
    out += [f"PVC {c} does not exist on kind (only {', '.join(sorted(KIND_PVCS))})"
            for c in claims if c is not None and c not in KIND_PVCS]
    scheduling = spec.get("scheduling") or {}
    if scheduling.get("priorityClassName"):
        out.append(f"PriorityClass {scheduling['priorityClassName']} does not exist on kind")
    if (spec.get("network") or {}).get("profile", "default") != "default":
        out.append("kind's operator has the network profile 'default' only")
    return out


def _resource_blockers(who: str, res: dict[str, Any]) -> list[str]:
    out = []
    if res.get("gpus"):
        out.append(f"{who}: {res['gpus']} GPUs; kind has none")
    out += [f"{who}: {name}; kind has none" for name in res.get("extra") or {}]
    if "cpu" in res and parse_quantity(res["cpu"]) > KIND_POD_CPU:
        out.append(f"{who}: {res['cpu']} CPUs; a kind worker has room for {KIND_POD_CPU} per pod")
    if "memory" in res and parse_quantity(res["memory"]) > KIND_POD_MEMORY:
        out.append(f"{who}: {res['memory']} of memory; more than a kind worker is sure to have")
    return out


def snippets(text: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    """(``name:line``, manifest) for every TrainingJob / TrainingSweep in the ```yaml blocks of the
    Markdown ``text``, fragments wrapped (module docstring)."""
    out = []
    for m in FENCE.finditer(text):
        where = f"{name}:{text.count(chr(10), 0, m.start()) + 1}"
        docs = [d for d in yaml.safe_load_all(m.group(2)) if d is not None]
        if len(docs) == 1 and isinstance(docs[0], dict) and list(docs[0]) == ["spec"]:
            spec = {"image": KIND_IMAGE, **(docs[0]["spec"] or {})}
            docs = [{"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "fragment"}, "spec": spec}]
        out += [(where, d) for d in docs if ours(d)]
    return out


def doc_snippets() -> list[tuple[str, dict[str, Any]]]:
    return [s for path in DOCS for s in snippets(path.read_text(), str(path.relative_to(ROOT)))]


def runtime_repository(values: dict[str, Any]) -> str:
    """templates/configmap.yaml's runtimeImage repository: runtime.image.repository, else the
    operator's repository with its last segment operator → runtime (make images pushes both)."""
    given, operator = values["runtime"]["image"]["repository"], values["image"]["repository"]
    if given or not (operator == "operator" or operator.endswith("/operator")):
        return given
    return operator[: -len("operator")] + "runtime"


def chart_version() -> str:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]


def chart_operator_config() -> dict[str, Any]:
    """The operator config the chart installs with its default values (templates/configmap.yaml,
    release ``phalanx`` in ``phalanx-system``)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return {
        "networkProfiles": copy.deepcopy(values["networkProfiles"]),
        "topology": copy.deepcopy(values["topology"]),
        "jobTolerations": copy.deepcopy(values["jobTolerations"]),
        "podCreateConcurrency": values["podCreateConcurrency"],
        "createPinned": values["createPinned"],
        "restartInPlace": values["restartInPlace"],
        "replaceLostNodes": values["replaceLostNodes"],
        "defaultShmSize": values["defaultShmSize"],
        **({"runtimeImage": f"{runtime_repository(values)}:{values['runtime']['image']['tag'] or chart_version()}"}
           if runtime_repository(values) else {}),
        "policy": copy.deepcopy(values["policy"]),
        "limits": copy.deepcopy(values["limits"]),
        "health": copy.deepcopy(values["health"]),
        "networkPolicy": {
            "enabled": values["networkPolicy"]["enabled"],
            "operatorNamespaceLabels": {"kubernetes.io/metadata.name": "phalanx-system"},
            "operatorPodLabels": {"app.kubernetes.io/name": "phalanx-operator", "app.kubernetes.io/instance": "phalanx"},
            "scraperNamespaceLabels": copy.deepcopy(values["networkPolicy"]["scraperNamespaceLabels"]),
            "scraperPodLabels": copy.deepcopy(values["networkPolicy"]["scraperPodLabels"]),
        },
    }
