"""The CLI's sweep side: `phalanx validate|local|render` on a file with TrainingSweeps, `phalanx
watch tsw/NAME`, `phalanx crd --sweep`. phalanx.cli calls these first; ``None`` means "no sweep
here, carry on as for TrainingJobs" (``crd`` returns the text for phalanx.cli to write)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from phalanx import constants

if TYPE_CHECKING:
    from phalanx.api.config import OperatorConfig
    from phalanx.sweep.check import Expansion

SWEEP_PREFIXES = ("tsw/", "trainingsweep/", "trainingsweeps/", f"{constants.SWEEP_CRD_NAME}/")


def is_sweep(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == constants.SWEEP_KIND


def _docs(path: str) -> list[Any]:
    from phalanx.api.manifests import read_documents

    return read_documents(path)


def _config(args: argparse.Namespace):
    from phalanx.api.manifests import load_operator_config

    return load_operator_config(getattr(args, "config", None))


def _sweeps(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The file's TrainingSweeps (none from stdin: phalanx.cli reads that as TrainingJobs)."""
    return [] if args.job == "-" else [d for d in _docs(args.job) if is_sweep(d)]


def _checked_sweep(doc: dict[str, Any], config: OperatorConfig, path: str) -> Expansion:
    """The sweep's verdict (its namespace defaults to ``default``), its problems printed."""
    from phalanx.api.manifests import document_name
    from phalanx.sweep.check import check_sweep

    if isinstance(doc.get("metadata"), dict):
        doc["metadata"].setdefault("namespace", "default")
    expansion = check_sweep(doc, config)
    for problem in expansion.problems:
        print(f"error: {path}: TrainingSweep {document_name(doc)}: {problem}", file=sys.stderr)
    return expansion


def validate(args: argparse.Namespace) -> int | None:
    """Every document of the file: sweeps by the sweep verdict, TrainingJobs by theirs."""
    if args.job == "-":
        return None
    docs = _docs(args.job)
    if not any(is_sweep(d) for d in docs):
        return None
    from phalanx.api.manifests import document_name, is_job_attempt
    from phalanx.validate import check_document

    config, bad = _config(args), 0
    for doc in docs:
        if is_sweep(doc):
            expansion = _checked_sweep(doc, config, args.job)
            if expansion.valid:
                print(f"{args.job}: TrainingSweep {document_name(doc)}: valid ({len(expansion.trials)} trials)")
            else:
                bad += 1
        elif is_job_attempt(doc):
            job, errors = check_document(doc, config, args.job)
            for line in errors:
                print(line, file=sys.stderr)
            if job is None:
                bad += 1
            else:
                print(f"{args.job}: TrainingJob {document_name(doc)}: valid")
    return 1 if bad else 0


def local(args: argparse.Namespace) -> int | None:
    """`phalanx local SWEEP.yaml`: the first TrainingSweep of the file as local processes."""
    sweeps = _sweeps(args)
    if not sweeps:
        return None
    from phalanx.sweep.local import run_local_sweep

    return run_local_sweep(sweeps[0], config=_config(args), checkpoint_dir=args.checkpoint_dir,
                           timeout=args.timeout, json_out=args.json)


def render(args: argparse.Namespace) -> int | None:
    """`phalanx render SWEEP.yaml`: the trial TrainingJobs the sweep would create."""
    sweeps = _sweeps(args)
    if not sweeps:
        return None
    from phalanx.api.manifests import dump_yaml_stream
    from phalanx.sweep.decide import trial_manifest

    out, bad = [], 0
    for doc in sweeps:
        expansion = _checked_sweep(doc, _config(args), args.job)
        if not expansion.valid:
            bad += 1
            continue
        expansion.sweep.metadata.uid = expansion.sweep.metadata.uid or "00000000-0000-0000-0000-000000000000"
        out += [trial_manifest(expansion.sweep, t) for t in expansion.trials]
    if bad:
        return 1
    sys.stdout.write(dump_yaml_stream(out))
    return 0


def watch(args: argparse.Namespace) -> int | None:
    """`phalanx watch tsw/NAME` (or trainingsweep/NAME, or --sweep NAME)."""
    name = args.job
    prefix = next((p for p in SWEEP_PREFIXES if name.startswith(p)), None)
    if prefix is None and not getattr(args, "sweep", False):
        return None
    name = name[len(prefix):] if prefix else name
    from kubernetes import client, config

    from phalanx.sweep.watch import watch_sweep

    config.load_kube_config(config_file=args.kubeconfig)
    return watch_sweep(client.CustomObjectsApi(), name, args.namespace, args.timeout)


def crd(args: argparse.Namespace) -> str | None:
    """`phalanx crd --sweep`: the TrainingSweep CRD, for phalanx.cli to write."""
    if not getattr(args, "sweep", False):
        return None
    from phalanx.api.sweep import sweep_crd_yaml

    return sweep_crd_yaml()
