"""Packing and writing a prepared directory.

Documents are tokenized in batches (``encode_batch``: the Rust library's threads), each followed
by the end-of-document token, and appended to one stream per split, no padding:

- ``<split>.bin``: the tokens, ``uint16`` when the vocabulary has at most 65535 entries, else ``uint32``;
- ``<split>.mask``: ``uint8`` per token, 1 when it counts as a label (chat data: the answers), only
  when some token does not count;
- ``<split>.idx``: ``uint64`` offsets of each document's first token, and the stream's length last;
- ``meta.json``: format version, dtype, vocabulary size, end-of-document id, tokenizer fingerprint,
  the inputs (sizes and modification times), end-of-document id and options (``key``: what makes
  two preparations the same), and per split the documents, tokens, counted tokens and the SHA-256
  of its tokens and mask (what a checkpoint's loader position refers to).

Splits are ``train`` and ``eval``: a document goes to ``eval`` when it comes from an eval input, or
when the first 8 bytes of the SHA-256 of its content, as a fraction of 2^64, are below
``eval_fraction`` (deterministic: the same documents go to the same split on every machine, in any
order). Files are written into a temporary directory inside the output directory (which may be a
volume's mount point, so no rename of the directory itself) and renamed into place; ``meta.json``
is removed first and renamed in last, so a directory with a ``meta.json`` is always complete.
One preparation of a directory at a time: ``preparation_lock`` (an exclusive ``flock`` on
``.prepare.lock``) is held from the key check through publication, so two jobs (or a job and
``phalanx data prepare``) naming the same ``data.path`` wait for each other, and a temporary
directory found while holding it belongs to a preparation that died.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from phalanx_runtime.data.options import PrepareOptions, field_error

FORMAT_VERSION = 1
META_FILE = "meta.json"
SPLITS = ("train", "eval")
SPLIT_SUFFIXES = (".bin", ".mask", ".idx")
TMP_PREFIX = ".prepare-tmp-"
LOCK_FILE = ".prepare.lock"
# What a prepared directory may hold besides meta.json (a fresh volume's root has lost+found).
PREPARATION_FILES = frozenset({META_FILE, LOCK_FILE, "lost+found"} | {s + x for s in SPLITS for x in SPLIT_SUFFIXES})


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 65535 else "uint32"


def eval_by_hash(document, fraction: float) -> bool:
    if fraction <= 0:
        return False
    content = document if isinstance(document, str) else json.dumps(document, sort_keys=True, ensure_ascii=False)
    digest = hashlib.sha256(content.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") < fraction * 2**64


class SplitWriter:
    """One split's files, appended document by document."""

    def __init__(self, directory: Path, name: str, dtype: str):
        self.directory, self.name, self.dtype = directory, name, np.dtype(dtype)
        self.tokens = open(directory / f"{name}.bin", "wb")  # noqa: SIM115 (closed in close())
        self.mask = None  # opened at the first token that does not count
        self.starts = array("Q")
        self.n_tokens = self.counted = 0
        self.tokens_sha256, self.mask_sha256 = hashlib.sha256(), hashlib.sha256()

    def add(self, ids: np.ndarray, mask: np.ndarray | None) -> None:
        """A document's tokens; ``mask`` (bool, per token) None: every token counts."""
        self.starts.append(self.n_tokens)
        data = ids.astype(self.dtype, copy=False).tobytes()
        self.tokens.write(data)
        self.tokens_sha256.update(data)
        if mask is not None and self.mask is None and not mask.all():
            self.mask = open(self.directory / f"{self.name}.mask", "wb")  # noqa: SIM115
            self._write_ones(self.n_tokens)  # every earlier token counted
        if self.mask is not None:
            self._write_mask((mask if mask is not None else np.ones(len(ids), bool)).astype(np.uint8).tobytes())
        self.n_tokens += len(ids)
        self.counted += int(mask.sum()) if mask is not None else len(ids)

    def _write_ones(self, n: int, chunk: int = 1 << 24) -> None:
        for start in range(0, n, chunk):
            self._write_mask(np.ones(min(chunk, n - start), np.uint8).tobytes())

    def _write_mask(self, data: bytes) -> None:
        self.mask.write(data)
        self.mask_sha256.update(data)

    def close(self) -> dict:
        self.tokens.close()
        if self.mask is not None:
            self.mask.close()
        np.append(np.frombuffer(self.starts, dtype=np.uint64), np.uint64(self.n_tokens)).tofile(
            self.directory / f"{self.name}.idx")
        info = {"documents": len(self.starts), "tokens": self.n_tokens, "counted": self.counted,
                "masked": self.mask is not None, "sha256": self.tokens_sha256.hexdigest()}
        if self.mask is not None:
            info["mask_sha256"] = self.mask_sha256.hexdigest()
        return info


def describe_input(path: Path) -> dict:
    from phalanx_runtime.data.readers import input_files

    files = input_files(path)
    stats = [f.stat() for f in files]
    return {"path": str(path), "size": sum(s.st_size for s in stats),
            "mtime_ns": max((s.st_mtime_ns for s in stats), default=0)}


def preparation_key(options: PrepareOptions, inputs: list[Path], eval_inputs: list[Path], tokenizer_sha256: str,
                    eos_id: int) -> dict:
    """What makes two preparations the same: equal keys, equal output. The end-of-document id is
    in it because it may come from the model's config.json, outside the tokenizer fingerprint."""
    return {"version": FORMAT_VERSION, "tokenizer_sha256": tokenizer_sha256, "eos_id": eos_id, "format": options.format,
            "text_field": options.text_field, "messages_field": options.messages_field,
            "eval_fraction": options.eval_fraction, "inputs": [describe_input(p) for p in inputs],
            "eval_inputs": [describe_input(p) for p in eval_inputs]}


def read_meta(directory: str | os.PathLike) -> dict | None:
    try:
        return json.loads((Path(directory) / META_FILE).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None


@contextmanager
def preparation_lock(out: Path) -> Iterator[None]:
    """Exclusive ownership of ``out``'s preparation (``out`` created if missing)."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_output_dir(out: Path) -> None:
    """``out`` is empty or a prepared directory (publication replaces split files by name: in any
    other folder it would delete files that are not its own)."""
    if (out / META_FILE).exists():
        return
    foreign = sorted(p.name for p in out.iterdir() if p.name not in PREPARATION_FILES and not p.name.startswith(TMP_PREFIX))
    if foreign:
        raise field_error("out", f"{out} is not empty and holds no prepared data (no {META_FILE}; it holds "
                                 f"{', '.join(foreign[:5])}{', …' if len(foreign) > 5 else ''}): choose an empty or "
                                 "new directory")


def temp_dir(out: Path) -> Path:
    """A fresh temporary directory inside ``out``; with ``preparation_lock`` held, so any other
    temporary directory is a leftover of an interrupted preparation, removed."""
    for stale in out.glob(TMP_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = out / f"{TMP_PREFIX}{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    return tmp


def publish(tmp: Path, out: Path, meta: dict) -> None:
    """Rename the split files into ``out``, then ``meta.json`` (the commit); remove ``tmp``."""
    (out / META_FILE).unlink(missing_ok=True)
    for split in SPLITS:
        for suffix in SPLIT_SUFFIXES:
            name = split + suffix
            if (tmp / name).exists():
                os.replace(tmp / name, out / name)
            else:
                (out / name).unlink(missing_ok=True)  # a stale file of an earlier preparation
    (tmp / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    os.replace(tmp / META_FILE, out / META_FILE)
    shutil.rmtree(tmp, ignore_errors=True)
