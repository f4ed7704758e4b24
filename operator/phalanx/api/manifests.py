"""Reading the user's YAML: TrainingJob manifests and the operator config — the one loader for
`phalanx render|validate|plan|local|operator` (and the runtime's local mode) — and writing the
manifests `phalanx render` prints.

YAML is parsed strictly (a duplicate key is refused: the second would silently replace the first);
``-`` reads stdin. What the documents mean is decided elsewhere (``phalanx.validate``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from phalanx import constants, safejson
from phalanx.api.config import OperatorConfig


class InputError(Exception):
    """The user's input is unusable: a one-line message (the CLI exits 1, no traceback)."""


class _StrictLoader(yaml.SafeLoader):
    """Refuses duplicate keys: the second one would silently replace the first."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, str | int | float | bool) and key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key if isinstance(key, str | int | float | bool) else id(key))
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def parse_documents(text: str) -> list[Any]:
    """Every non-empty document of a YAML stream, parsed strictly. Nesting deeper than the
    parser's recursion (a few hundred levels; a TrainingJob needs under 20) is refused."""
    if text.lstrip()[:1] in ("{", "["):  # JSON as JSON: YAML 1.1 reads 1e-05 as a string, refuses DEL
        try:
            doc = safejson.loads(text)
        except ValueError:
            pass  # YAML flow style that is not JSON
        else:
            return [d for d in (doc if isinstance(doc, list) else [doc]) if d is not None]
    try:
        return [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
    except RecursionError:
        raise InputError("the YAML is nested too deeply to read (hundreds of levels); "
                         "no TrainingJob or TrainingSweep field nests like that") from None


def read_documents(path: str) -> list[Any]:
    """Every non-empty document of a YAML file (``-``: stdin), parsed strictly."""
    return parse_documents(sys.stdin.read() if path == "-" else Path(path).read_text())


def document_name(doc: dict[str, Any]) -> str:
    """A document's name for messages: metadata.name, else metadata.generateName, else ``?``."""
    meta = doc.get("metadata")
    return str(meta.get("name") or meta.get("generateName") or "?") if isinstance(meta, dict) else "?"


def is_job_attempt(doc: Any) -> bool:
    """A TrainingJob, or a document meant as one (our API group, another kind)."""
    if not isinstance(doc, dict):
        return False
    return doc.get("kind") == constants.KIND or str(doc.get("apiVersion", "")).split("/")[0] == constants.GROUP


def read_jobs(path: str) -> list[dict[str, Any]]:
    """The documents of ``path`` meant as TrainingJobs (unchecked); InputError when there is none."""
    docs = read_documents(path)
    jobs = [d for d in docs if is_job_attempt(d)]
    if not jobs:
        kinds = sorted({str(d.get("kind")) for d in docs if isinstance(d, dict)})
        found = f"found kind {', '.join(kinds)}" if kinds else "found no Kubernetes object"
        raise InputError(f"{path}: no TrainingJob: {found}; expected apiVersion: {constants.API_VERSION}, kind: {constants.KIND}")
    return jobs


def load_operator_config(path: str | None) -> OperatorConfig:
    """The operator config file (Helm values' ``config``), as installed; the defaults without one
    (then what the installed operator holds, such as its runtimeImage, is not known)."""
    if not path:
        return OperatorConfig()
    return OperatorConfig.model_validate(yaml.safe_load(Path(path).read_text()) or {}).as_installed()


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the runtime config JSON) as readable block scalars."""


_BlockDumper.add_representer(
    str,
    lambda dumper, data: dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None),
)


def dump_yaml_stream(objs: list[dict[str, Any]]) -> str:
    """``objs`` as one YAML stream, keys in their order (what `phalanx render` prints)."""
    return yaml.dump_all(objs, Dumper=_BlockDumper, sort_keys=False)
