"""The CLI's sweep side: `phalanx validate|local|render` on a file with TrainingSweeps, `phalanx
watch tsw/NAME`, `phalanx crd --sweep`. phalanx.cli calls these first; ``None`` means "no sweep
here, carry on as for TrainingJobs"."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from phalanx import constants as C

SWEEP_PREFIXES = ("tsw/", "trainingsweep/", "trainingsweeps/", f"{C.SWEEP_CRD_NAME}/")


def is_sweep(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == C.SWEEP_KIND


def _docs(path: str) -> list[Any]:
    from phalanx.api.manifests import read_documents

    return read_documents(path)


def _config(args: argparse.Namespace):
    from phalanx.api.manifests import load_operator_config

    return load_operator_config(getattr(args, "config", None))


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "?") if isinstance(meta, dict) else "?"


def validate(args: argparse.Namespace) -> int | None:
    """Every document of the file: sweeps by the sweep verdict, TrainingJobs by theirs."""
    if args.job == "-":
        return None
    docs = _docs(args.job)
    if not any(is_sweep(d) for d in docs):
        return None
    from phalanx.api.manifests import is_job_attempt
    from phalanx.cli import _checked
    from phalanx.sweep.check import check_sweep

    config, bad = _config(args), 0
    for doc in docs:
        if is_sweep(doc):
            if isinstance(doc.get("metadata"), dict):
                doc["metadata"].setdefault("namespace", "default")
            expansion = check_sweep(doc, config)
            for problem in expansion.problems:
                print(f"error: {args.job}: TrainingSweep {_name(doc)}: {problem}", file=sys.stderr)
            if expansion.valid:
                print(f"{args.job}: TrainingSweep {_name(doc)}: valid ({len(expansion.trials)} trials)")
            else:
                bad += 1
        elif is_job_attempt(doc):
            if _checked(doc, config, args.job) is None:
                bad += 1
            else:
                print(f"{args.job}: TrainingJob {_name(doc)}: valid")
    return 1 if bad else 0


def local(args: argparse.Namespace) -> int | None:
    """`phalanx local SWEEP.yaml`: the first TrainingSweep of the file as local processes."""
    if args.job == "-":
        return None
    sweeps = [d for d in _docs(args.job) if is_sweep(d)]
    if not sweeps:
        return None
    from phalanx.sweep.local import run_local_sweep

    return run_local_sweep(sweeps[0], config=_config(args), checkpoint_dir=args.checkpoint_dir,
                           timeout=args.timeout, json_out=args.json)


def render(args: argparse.Namespace) -> int | None:
    """`phalanx render SWEEP.yaml`: the trial TrainingJobs the sweep would create."""
    if args.job == "-":
        return None
    sweeps = [d for d in _docs(args.job) if is_sweep(d)]
    if not sweeps:
        return None
    from phalanx.cli import dump_yaml_stream
    from phalanx.sweep.check import check_sweep
    from phalanx.sweep.decide import trial_manifest

    out, bad = [], 0
    for doc in sweeps:
        if isinstance(doc.get("metadata"), dict):
            doc["metadata"].setdefault("namespace", "default")
        expansion = check_sweep(doc, _config(args))
        for problem in expansion.problems:
            print(f"error: {args.job}: TrainingSweep {_name(doc)}: {problem}", file=sys.stderr)
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


def crd(args: argparse.Namespace) -> int | None:
    if not getattr(args, "sweep", False):
        return None
    from pathlib import Path

    from phalanx.api.sweep import sweep_crd_yaml

    text = sweep_crd_yaml()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
