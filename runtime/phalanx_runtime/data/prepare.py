"""Prepare a directory of packed tokens (``writer``'s layout) from raw files, or find it done.

``prepare(options)`` is idempotent: when ``<out>/meta.json`` has the same key (inputs with their
sizes and modification times, tokenizer fingerprint, end-of-document id, options) nothing is done. The command line::

    python -m phalanx_runtime.data.prepare --input a.jsonl [--input b.parquet …] --out DIR \\
        --tokenizer MODEL_DIR [--format F] [--text-field text] [--messages-field messages] \\
        [--eval-fraction 0.01] [--eval-input held_out.jsonl …]

prints the meta.json it wrote or found, and exits 1 naming the flag at fault on bad input.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

from phalanx_runtime.data.encode import Encoder
from phalanx_runtime.data.options import (
    FORMATS,
    MAX_EVAL_FRACTION,
    PrepareError,
    PrepareOptions,
    options_from_spec,
)
from phalanx_runtime.data.readers import read_documents, resolve_inputs
from phalanx_runtime.data.tokenizer import TokenizerDir, load_tokenizer
from phalanx_runtime.data.writer import (
    FORMAT_VERSION,
    SplitWriter,
    check_output_dir,
    eval_by_hash,
    preparation_key,
    preparation_lock,
    publish,
    read_meta,
    temp_dir,
    token_dtype,
)

log = logging.getLogger("phalanx_runtime")

BATCH_DOCUMENTS = 1024
BATCH_CHARS = 8 << 20


def _batches(documents, max_docs: int = BATCH_DOCUMENTS, max_chars: int = BATCH_CHARS):
    batch, chars = [], 0
    for document in documents:
        batch.append(document)
        chars += len(document) if isinstance(document, str) else 64 * len(document)
        if len(batch) >= max_docs or chars >= max_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _write_splits(options: PrepareOptions, tok: TokenizerDir, sources: list[tuple[Path, str, bool]],
                  tmp: Path, encoder: Encoder) -> dict:
    """Every document of every source, encoded and appended to its split; the splits' counts."""
    dtype = token_dtype(tok.vocab_size)
    writers = {"train": SplitWriter(tmp, "train", dtype)}
    for path, fmt, is_eval_input in sources:
        for batch in _batches(read_documents(path, fmt, options.text_field, options.messages_field)):
            for document, (ids, mask) in zip(batch, encoder.encode(batch), strict=True):
                split = "eval" if is_eval_input or eval_by_hash(document, options.eval_fraction) else "train"
                if split not in writers:
                    writers[split] = SplitWriter(tmp, split, dtype)
                writers[split].add(ids, mask)
    return {name: writer.close() for name, writer in writers.items()}


def _resolve(options: PrepareOptions) -> tuple[TokenizerDir, list[tuple[Path, str, bool]], dict]:
    options.check()
    tok = load_tokenizer(options.tokenizer)
    inputs = resolve_inputs(options.inputs, options.format, "inputs", exclude=Path(options.out))
    eval_inputs = resolve_inputs(options.eval_inputs, options.format, "eval_inputs", exclude=Path(options.out))
    key = preparation_key(options, [p for p, _ in inputs], [p for p, _ in eval_inputs], tok.fingerprint, tok.eos_id)
    sources = [(p, f, False) for p, f in inputs] + [(p, f, True) for p, f in eval_inputs]
    return tok, sources, key


def prepare(options: PrepareOptions) -> tuple[dict, bool]:
    """(meta.json, whether this call wrote it). Raises PrepareError naming the field at fault."""
    tok, sources, key = _resolve(options)
    out = Path(options.out)
    existing = read_meta(out)
    if existing is not None and existing.get("key") == key:
        return existing, False
    if out.exists() and not out.is_dir():
        raise PrepareError(f"data.path (--out): {out} is a file, not a directory")
    with preparation_lock(out):
        existing = read_meta(out)  # another preparation may have finished while this one waited
        if existing is not None and existing.get("key") == key:
            return existing, False
        check_output_dir(out)
        return _prepare_locked(options, tok, sources, key, out), True


def _prepare_locked(options: PrepareOptions, tok: TokenizerDir, sources: list[tuple[Path, str, bool]], key: dict,
                    out: Path) -> dict:
    t0 = time.perf_counter()
    tmp = temp_dir(out)
    encoder = Encoder(tok, chat=options.messages_field is not None)
    try:
        splits = _write_splits(options, tok, sources, tmp, encoder)
        if splits["train"]["tokens"] == 0:
            raise PrepareError("data.prepare.inputs (--input): no documents for the train split")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    meta = {"version": FORMAT_VERSION, "dtype": token_dtype(tok.vocab_size), "vocab_size": tok.vocab_size,
            "eos_id": tok.eos_id, "tokenizer": {"path": str(tok.path), "sha256": tok.fingerprint},
            "splits": splits, "key": key, "seconds": round(time.perf_counter() - t0, 3)}
    if encoder.renderer is not None:
        meta["answers"] = {"found": encoder.answers_found, "missing": encoder.answers_missing}
        if encoder.answers_missing:
            log.warning("data.prepare.messagesField: %d of %d assistant answers were not found in the chat "
                        "template's render and do not count in the loss", encoder.answers_missing,
                        encoder.answers_found + encoder.answers_missing)
    publish(tmp, out, meta)
    return meta


def check_eval_split(meta: dict, *, seq_len: int, global_batch: int) -> None:
    """Evaluation reads whole global batches of ``seq_len + 1``-token samples: the eval split must
    hold at least one (checked right after preparing, before the model is built)."""
    needed = global_batch * seq_len + 1
    tokens = meta["splits"].get("eval", {}).get("tokens", 0)
    if tokens < needed:
        raise PrepareError(f"data.prepare.evalFraction (--eval-fraction): the eval split holds {tokens} tokens, "
                           f"fewer than one global batch of samples (training.globalBatchSize {global_batch} × "
                           f"(data.seqLen {seq_len}) + 1 = {needed}): raise evalFraction or add evalInputs")


def ensure_prepared(data, pretrained_path: str | None = None, eval_global_batch: int | None = None) -> tuple[dict, bool]:
    """A job's ``data.prepare`` (config.DataSpec ``data``) into ``data.path``, unless done;
    ``eval_global_batch`` (training.eval set): the eval split must hold one such batch."""
    meta, wrote = prepare(options_from_spec(data.prepare, data.path, pretrained_path))
    train = meta["splits"]["train"]
    log.info("data.prepare: %s %s: %d documents, %d tokens", "wrote" if wrote else "found", data.path,
             train["documents"], train["tokens"])
    if eval_global_batch is not None:
        check_eval_split(meta, seq_len=data.seq_len, global_batch=eval_global_batch)
    return meta, wrote


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m phalanx_runtime.data.prepare",
                                description="Tokenize, pack and write training data (train/eval splits).")
    p.add_argument("--input", dest="inputs", action="append", required=True, metavar="PATH",
                   help="a file, directory, glob or datasets directory (repeatable)")
    p.add_argument("--out", required=True, metavar="DIR", help="the prepared directory (the job's data.path)")
    p.add_argument("--tokenizer", required=True, metavar="DIR", help="a directory with tokenizer.json")
    p.add_argument("--format", choices=FORMATS, help="input format (default: from each file's name)")
    p.add_argument("--text-field", default="text", metavar="NAME", help="the text's field (default: text)")
    p.add_argument("--messages-field", metavar="NAME", help="chat data: the field of {role, content} messages")
    p.add_argument("--eval-fraction", type=float, default=0.0, metavar="F",
                   help=f"held-out share of the documents (0 to {MAX_EVAL_FRACTION})")
    p.add_argument("--eval-input", dest="eval_inputs", action="append", default=[], metavar="PATH",
                   help="held-out input (repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = PrepareOptions(inputs=tuple(args.inputs), out=args.out, tokenizer=args.tokenizer, format=args.format,
                             text_field=args.text_field, messages_field=args.messages_field,
                             eval_fraction=args.eval_fraction, eval_inputs=tuple(args.eval_inputs))
    try:
        meta, wrote = prepare(options)
    except PrepareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{'prepared' if wrote else 'already prepared'}: {args.out}", file=sys.stderr)
    print(json.dumps(meta, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
