"""``python -m phalanx_runtime.export CKPT_DIR --out DIR [--step N] [--base DIR] [--dtype D]
[--merge-lora | --adapter-only]``:
a committed checkpoint of the built-in transformer as a Hugging Face model directory (safetensors
shards, index, config.json, tokenizer files) that transformers loads as it is, or its LoRA adapters
as a PEFT adapter directory. One process, no process group, one tensor in memory at a time
(``models/huggingface/export.py``). ``phalanx export`` runs this.

CKPT_DIR is a job's checkpoint directory (the newest valid ``step-N``, or ``--step N``) or one
``step-N`` directory in it; the model is described by the ``model/`` directory the training run
recorded there. A checkpoint that holds LoRA adapters only is merged with the base weights read from
the pretrained directory the run recorded (as the pods saw it), or from ``--base DIR`` (a copy of it
on this machine); either must be the model the run trained.

CKPT_DIR and ``--out`` may be object-storage URIs (``s3://…``, ``gs://…``; checkpoint.storage's
``<uri>/<namespace>/<job>``), reached with this machine's credentials: the chosen step and the
model record are copied to a temporary directory first, and the export is uploaded after.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from phalanx_common.storage import is_object_uri
from phalanx_runtime.components.checkpoint import (
    COMMIT_MARKER,
    MODEL_DIR,
    STEP_RE,
    latest_valid,
    latest_valid_in,
    validate_checkpoint,
)

EXIT_FAILED = 1
EXPORT_DTYPE_NAMES = ("float32", "bfloat16", "float16")  # models/huggingface/export.py EXPORT_DTYPES
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """``5GB`` → 5·10⁹, ``512MiB`` → 512·2²⁰, ``1000`` → 1000 bytes."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 5GB, 500MB, 2GiB)")
    value = float(match.group(1)) * _UNITS[(match.group(2) or "B").upper()]
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a shard holds at least one byte")
    return int(value)


def find_step(ckpt: Path, step: int | None) -> Path:
    """The committed checkpoint to export (ValueError saying why there is none)."""
    if (ckpt / COMMIT_MARKER).exists():
        if step is not None:
            raise ValueError(f"{ckpt} is one checkpoint; --step goes with the directory above it")
        chosen = ckpt
    elif step is not None:
        chosen = ckpt / f"step-{step}"
    else:
        found = latest_valid(ckpt)
        if found is None:
            raise ValueError(f"{ckpt}: no valid committed checkpoint (step-N with a COMMITTED marker)")
        return found[1]
    why = validate_checkpoint(chosen)
    if why is not None:
        raise ValueError(f"{chosen}: not a valid committed checkpoint ({why})")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m phalanx_runtime.export",
                                 description="Export a committed checkpoint as a Hugging Face model directory.")
    ap.add_argument("ckpt", metavar="CKPT_DIR", help="a job's checkpoint directory, or one step-N directory in it")
    ap.add_argument("--out", required=True, metavar="DIR", help="directory to write (created; must be empty)")
    ap.add_argument("--step", type=int, metavar="N", help="export step-N (default: the newest valid checkpoint)")
    ap.add_argument("--base", metavar="DIR", help="LoRA adapters-only checkpoints: the pretrained model directory "
                    "to read the base weights from (default: the path the run recorded)")
    ap.add_argument("--dtype", choices=tuple(EXPORT_DTYPE_NAMES),
                    help="dtype of the exported weights (default: the model's own, as its config.json names it)")
    lora = ap.add_mutually_exclusive_group()
    lora.add_argument("--merge-lora", action="store_true",
                      help="LoRA checkpoints: the model with the adapters merged in (the default)")
    lora.add_argument("--adapter-only", action="store_true",
                      help="LoRA checkpoints: only the adapters, as a PEFT adapter directory")
    ap.add_argument("--max-shard-size", type=parse_size, default="5GB", metavar="SIZE",
                    help="largest safetensors file (default 5GB; one larger tensor gets a file of its own)")
    return ap


@contextmanager
def fetched_step(uri: str, step: int | None):
    """The committed step of a checkpoint prefix in object storage (``--step``, else the newest
    valid one; or ``uri`` is one ``step-N``), copied with the model record into a temporary
    directory laid out as a job's checkpoint directory; yields its ``step-N``."""
    from phalanx_runtime.components.objectstore import ObjectStore

    base, _, last = uri.rstrip("/").rpartition("/")
    if (m := STEP_RE.match(last)) is not None:
        if step is not None:
            raise ValueError(f"{uri} is one checkpoint; --step goes with the prefix above it")
        uri, step = base, int(m.group(1))
    store = ObjectStore(uri)
    if step is None:
        found = latest_valid_in(store)
        if found is None:
            raise ValueError(f"{uri}: no valid committed checkpoint (step-N with a COMMITTED object)")
        step = found[0]
    elif (why := store.validate(step)) is not None:
        raise ValueError(f"{store.step_url(step)}: not a valid committed checkpoint ({why})")
    with tempfile.TemporaryDirectory(prefix="phalanx-export-") as tmp:
        job = Path(tmp) / "checkpoint"
        store.get_tree(f"step-{step}", job / f"step-{step}")
        store.get_tree(MODEL_DIR, job / MODEL_DIR)
        yield job / f"step-{step}"


def _export(args: argparse.Namespace, step_dir: Path, out: Path) -> Path:
    from phalanx_runtime.models.huggingface.export import export_adapter, export_hf, load_export

    export = load_export(step_dir, merge_lora=True, max_shard_bytes=args.max_shard_size, base_dir=args.base,
                         dtype=args.dtype)
    if args.adapter_only:
        return export_adapter(export, out)
    return export_hf(export, out)


def run(args: argparse.Namespace) -> Path | str:
    remote_out = is_object_uri(args.out)
    if remote_out:
        from phalanx_runtime.components.objectstore import ObjectStore

        target = ObjectStore(args.out)
        if target.fs.find(target.path):
            raise ValueError(f"--out {args.out}: holds objects already; name an empty prefix")
    else:
        out = Path(args.out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ValueError(f"--out {out}: exists and is not an empty directory")
    with fetched_step(args.ckpt, args.step) if is_object_uri(args.ckpt) else _local_step(args) as step_dir:
        if not remote_out:
            return _export(args, step_dir, out)
        with tempfile.TemporaryDirectory(prefix="phalanx-export-out-") as tmp:
            written = _export(args, step_dir, Path(tmp) / "out")
            target.put_dir(written)
    return args.out.rstrip("/")


@contextmanager
def _local_step(args: argparse.Namespace):
    yield find_step(Path(args.ckpt), args.step)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        out = run(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
