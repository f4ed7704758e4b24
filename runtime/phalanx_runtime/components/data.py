"""Data: synthetic, token files (np.memmap, uint16/uint32), a prepared directory (``phalanx data
prepare``: packed tokens, train/eval splits, answer masks) or the built-in byte-level corpus.

Every source is a list of fixed-length samples (``seq_len + 1`` tokens: inputs and shifted
labels). Step ``s`` consumes global samples ``perm[s·G … (s+1)·G)`` (G = global batch, a fresh
deterministic permutation each epoch); data-parallel rank ``r`` of ``D`` takes the contiguous
slice ``r·G/D … (r+1)·G/D`` of it. So a run with any data-parallel degree sees exactly the
tokens of the single-process run, and the position is one integer: ``state_dict()`` /
``load_state_dict()`` resume it. A prepared source's ``content_id`` (the SHA-256 of its split's
tokens and mask) is saved with the position: a resume over different prepared data (an input
changed between restarts, so rank 0 prepared again) is refused instead of continuing at the
same step of other documents.

A source with ``masked`` True (prepared chat data) says per sample which labels count
(``label_mask``); the loader writes -100 into the labels that do not, and ``global_count`` is the
step's number of counted labels over the whole global batch (every rank computes it from the
masks, no collective): the loss divides by it (components/loss.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from phalanx_runtime.env import ENV_CORPUS_MAX_BYTES

CORPUS_MAX_BYTES = int(os.environ.get(ENV_CORPUS_MAX_BYTES, 8 << 20))


class SyntheticSource:
    """Learnable synthetic sequences: x[t+1] = (x[t] + stride) mod V, stride and start drawn
    per sample from a generator seeded by (seed, index) — deterministic on every machine."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int, num_samples: int = 1 << 20):
        self.vocab, self.seq_len, self.seed, self.n = vocab_size, seq_len, seed, num_samples

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(i))
        start = torch.randint(0, self.vocab, (1,), generator=g)
        stride = torch.randint(1, max(self.vocab // 8, 2), (1,), generator=g)
        t = torch.arange(self.seq_len + 1)
        return (start + stride * t) % self.vocab


class TokenSource:
    """A flat token file (np.memmap, uint16 or uint32), cut into non-overlapping samples."""

    def __init__(self, path: str, dtype: str, seq_len: int):
        import numpy as np

        self.arr = np.memmap(path, dtype=np.dtype(dtype), mode="r")
        self.seq_len = seq_len
        self.n = (len(self.arr) - 1) // seq_len
        if self.n < 1:
            raise ValueError(f"data.path: {path} holds {len(self.arr)} tokens, fewer than seqLen + 1")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        import numpy as np

        s = int(i) * self.seq_len
        return torch.from_numpy(np.asarray(self.arr[s:s + self.seq_len + 1], dtype=np.int64))


class PreparedSource:
    """One split (``train`` or ``eval``) of a prepared directory (phalanx_runtime.data.writer):
    the packed token stream cut into non-overlapping samples of ``seq_len + 1`` tokens, as
    TokenSource does, with the split's mask of counted labels when it has one."""

    def __init__(self, path: str, seq_len: int, split: str = "train", vocab_size: int | None = None):
        import numpy as np

        from phalanx_runtime.data.writer import FORMAT_VERSION, read_meta

        meta = read_meta(path)
        if meta is None:
            raise ValueError(f"data.path: {path} holds no prepared data (no meta.json): run `phalanx data prepare` "
                             "or set data.prepare")
        if meta.get("version") != FORMAT_VERSION:
            raise ValueError(f"data.path: {path} was prepared in format {meta.get('version')}, this runtime reads "
                             f"{FORMAT_VERSION}: prepare it again")
        if vocab_size is not None and meta["vocab_size"] > vocab_size:
            raise ValueError(f"data.path: {path} was tokenized with a vocabulary of {meta['vocab_size']}, more than "
                             f"the model's {vocab_size}")
        info = meta["splits"].get(split)
        if info is None:
            raise ValueError(f"data.path: {path} has no {split} split")
        self.meta, self.split, self.seq_len = meta, split, seq_len
        self.content_id = hashlib.sha256(json.dumps(
            {k: info.get(k) for k in ("tokens", "counted", "sha256", "mask_sha256")}, sort_keys=True).encode()).hexdigest()
        self.arr = np.memmap(os.path.join(path, f"{split}.bin"), dtype=np.dtype(meta["dtype"]), mode="r")
        self.masked = bool(info["masked"])
        self.mask = np.memmap(os.path.join(path, f"{split}.mask"), dtype=np.uint8, mode="r") if self.masked else None
        self.n = (len(self.arr) - 1) // seq_len
        if self.n < 1:
            raise ValueError(f"data.path: the {split} split of {path} holds {len(self.arr)} tokens, fewer than "
                             "seqLen + 1")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        import numpy as np

        s = int(i) * self.seq_len
        return torch.from_numpy(np.asarray(self.arr[s:s + self.seq_len + 1], dtype=np.int64))

    def label_mask(self, i: int) -> torch.Tensor:
        """True where sample ``i``'s label (its tokens 1 … seq_len) counts."""
        s = int(i) * self.seq_len
        return torch.from_numpy(self.mask[s + 1:s + self.seq_len + 1] != 0)

    def counted(self, i: int) -> int:
        s = int(i) * self.seq_len
        return int(self.mask[s + 1:s + self.seq_len + 1].sum(dtype="int64"))


def make_eval_source(data, *, seq_len: int, vocab_size: int | None = None) -> PreparedSource | None:
    """The held-out split of ``data`` (config.DataSpec), or None when the data has none (any
    source but a prepared directory with an eval split)."""
    from phalanx_runtime.data.writer import read_meta

    if data.source != "prepared" or not data.path:
        return None
    meta = read_meta(data.path)
    if meta is None or "eval" not in meta.get("splits", {}):
        return None
    return PreparedSource(data.path, seq_len, split="eval", vocab_size=vocab_size)


def corpus_files() -> list[Path]:
    """The Python standard library's .py sources, in a deterministic (sorted) order."""
    root = Path(os.path.dirname(os.__file__))
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__", "test", "tests", "idlelib"))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    return sorted(files, key=lambda p: str(p.relative_to(root)))


def corpus_bytes(max_bytes: int = CORPUS_MAX_BYTES) -> bytes:
    out, n = [], 0
    for f in corpus_files():
        try:
            b = f.read_bytes()
        except OSError:
            continue
        out.append(b)
        n += len(b)
        if n >= max_bytes:
            break
    return b"".join(out)[:max_bytes]


class CorpusSource:
    """Byte-level text (vocab 256) so the demo trains on real text with no download."""

    def __init__(self, seq_len: int, max_bytes: int = CORPUS_MAX_BYTES):
        data = corpus_bytes(max_bytes)
        self.tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.seq_len = seq_len
        self.n = (len(self.tokens) - 1) // seq_len
        self.fingerprint = hashlib.sha256(data).hexdigest()[:16]
        self.python = f"{sys.version_info.major}.{sys.version_info.minor}"

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        s = int(i) * self.seq_len
        return self.tokens[s:s + self.seq_len + 1].long()


def make_source(source: str, *, seq_len: int, vocab_size: int | None, seed: int, path: str | None = None,
                dtype: str = "uint16"):
    """``vocab_size``: the model's (None: unknown, an entrypoint model; synthetic data then uses 256)."""
    if source == "synthetic":
        return SyntheticSource(vocab_size or 256, seq_len, seed)
    if source == "tokens":
        if not path:
            raise ValueError("data.path is required when source is tokens")
        return TokenSource(path, dtype, seq_len)
    if source == "prepared":
        if not path:
            raise ValueError("data.path is required when source is prepared")
        return PreparedSource(path, seq_len, vocab_size=vocab_size)
    if source == "corpus":
        return CorpusSource(seq_len)
    raise ValueError(f"data.source: unknown source {source!r}")


class DataLoader:
    """Deterministic, sharded by data-parallel rank, resumable by ``state_dict``."""

    def __init__(self, source, *, global_batch: int, dp_rank: int, dp_size: int, seed: int,
                 shuffle: bool = True):
        if global_batch % dp_size:
            raise ValueError(f"training.globalBatchSize {global_batch} not divisible by data-parallel degree {dp_size}")
        self.source, self.global_batch, self.seed, self.shuffle = source, global_batch, seed, shuffle
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.local_batch = global_batch // dp_size
        self.step = 0  # global batches consumed
        self.global_count = 0  # counted labels in the global batch of the last next_batch()
        self._perm_epoch, self._perm = -1, None

    def _index(self, k: int) -> int:
        n = len(self.source)
        epoch, j = divmod(k, n)
        if not self.shuffle:
            return j
        if n > (1 << 24):
            # Large sources: an affine permutation (2654435761 is prime) instead of randperm(n).
            return (j * 2654435761 + epoch * 97) % n
        if epoch != self._perm_epoch:
            g = torch.Generator().manual_seed(self.seed + 7919 * epoch)
            self._perm, self._perm_epoch = torch.randperm(n, generator=g), epoch
        return int(self._perm[j])

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's (inputs, labels) of the next global batch; labels -100 where they do not count."""
        start = self.step * self.global_batch
        indices = [self._index(start + self.dp_rank * self.local_batch + i) for i in range(self.local_batch)]
        rows = torch.stack([self.source[i] for i in indices])
        inputs, labels = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
        if getattr(self.source, "masked", False):
            labels[~torch.stack([self.source.label_mask(i) for i in indices])] = -100
            self.global_count = sum(self.source.counted(self._index(start + k)) for k in range(self.global_batch))
        else:
            self.global_count = self.global_batch * labels.shape[1]
        self.step += 1
        return inputs, labels

    def __iter__(self):
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict:
        state = {"step": self.step, "global_batch": self.global_batch, "seed": self.seed}
        content_id = getattr(self.source, "content_id", None)
        if content_id is not None:
            state["data"] = content_id
        return state

    def load_state_dict(self, state: dict) -> None:
        saved, current = state.get("data"), getattr(self.source, "content_id", None)
        if saved is not None and current is not None and saved != current:
            raise ValueError(f"data.prepare.inputs / data.path: the prepared data is not the data this job's checkpoint "
                             f"was trained on (an input changed since, so it was prepared again): resuming at global "
                             f"batch {state['step']} would read other documents. Restore the inputs, or start the job "
                             "afresh (a new checkpoint directory)")
        if state.get("global_batch", self.global_batch) != self.global_batch:
            # Resume at the same token position even if the global batch changed.
            self.step = (state["step"] * state["global_batch"]) // self.global_batch
        else:
            self.step = int(state["step"])
