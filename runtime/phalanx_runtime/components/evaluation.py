"""Held-out evaluation (``training.eval``): ``batches`` global batches of the data source's eval
split, the model in eval mode under no_grad, every ``everySteps`` steps (0: none before the end)
and after the last step.

``eval_loss`` = the sum of token cross-entropy over the counted labels (a label of -100 does not
count) of the whole eval set / their count, so every layout gives the single-process value: each
rank sums the tokens of its own forward (a pipeline's last stage: of its merged microbatches), and
one all-reduce over the world adds the (sum, count) pairs. Ranks without the last stage add zeros;
tensor-parallel ranks repeat the same pair, which scales sum and count alike and leaves the ratio
as it is. ``perplexity`` = exp(eval_loss), the largest float where that overflows.

The eval loader is its own (unshuffled, read from its first sample at every evaluation): it moves
neither the training loader nor any random generator, so training losses are the same with and
without evaluation. The loss is the token cross-entropy of the model's logits, whatever loss an
entrypoint model trains with.

Eval splits by ``data.source`` (:func:`eval_source`):

- synthetic: the samples after the training ones (indices ``len(train) …`` of the same generator,
  which training never reads);
- corpus: the bytes that follow the training corpus's (the next standard-library files), cut into
  samples the same way;
- any other source has none yet: asking for ``training.eval`` there is a ValueError.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from phalanx_runtime.components.data import (
    CORPUS_MAX_BYTES,
    DataLoader,
    PreparedSource,
    SyntheticSource,
    corpus_bytes,
    make_eval_source,
)
from phalanx_runtime.config import DataSpec, EvalSpec, JobSpec, Parallelism
from phalanx_runtime.distributed.pipeline import num_stages, stage_ids_for_rank

log = logging.getLogger("phalanx_runtime")

IGNORE_INDEX = -100  # a label that does not count (torch's cross_entropy default)
EVAL_LOSS, PERPLEXITY = "eval_loss", "perplexity"  # the progress record's and metrics.jsonl's names


# ---------------------------------------------------------------- decisions


def eval_due(step: int, total_steps: int, every_steps: int) -> bool:
    """Evaluate after ``step``: at every multiple of ``every_steps`` (0: never) and at the last step."""
    return step == total_steps or (every_steps > 0 and step % every_steps == 0)


def perplexity(loss: float) -> float:
    """exp(loss), bounded: the largest finite float where it overflows; NaN stays NaN."""
    try:
        return math.exp(loss)
    except OverflowError:
        return sys.float_info.max


def eval_metrics(loss: float) -> dict[str, float]:
    """The reported metrics of one evaluation: ``eval_loss`` and ``perplexity``."""
    return {EVAL_LOSS: loss, PERPLEXITY: perplexity(loss)}


def eval_batch_count(spec: EvalSpec, samples: int, global_batch: int) -> int:
    """Global batches per evaluation: ``spec.batches``, fewer when the eval split holds fewer
    (a batch is never read twice in one evaluation)."""
    if spec.batches < 1:
        raise ValueError(f"training.eval.batches: {spec.batches} must be at least 1")
    if spec.every_steps < 0:
        raise ValueError(f"training.eval.everySteps: {spec.every_steps} must be 0 or more")
    available = samples // global_batch
    if available < 1:
        raise ValueError(f"training.eval: the eval split holds {samples} samples, fewer than one global batch "
                         f"(training.globalBatchSize {global_batch})")
    return min(spec.batches, available)


# ---------------------------------------------------------------- eval splits


class HeldOut:
    """Samples ``start … start + count`` of ``source``, as a source of their own."""

    def __init__(self, source, start: int, count: int):
        self.source, self.start, self.n = source, start, count

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.source[self.start + int(i)]


class ByteSamples:
    """Byte-level tokens cut into non-overlapping samples of ``seq_len + 1`` (as CorpusSource)."""

    def __init__(self, data: bytes, seq_len: int):
        self.tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)
        self.seq_len = seq_len
        self.n = max(0, (len(self.tokens) - 1) // seq_len)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        s = int(i) * self.seq_len
        return self.tokens[s:s + self.seq_len + 1].long()


def synthetic_eval_source(data: DataSpec, *, vocab_size: int, seed: int, samples: int) -> HeldOut:
    train = SyntheticSource(vocab_size, data.seq_len, seed)  # as data.make_source builds it
    return HeldOut(train, start=len(train), count=samples)


def corpus_eval_source(data: DataSpec, *, vocab_size: int, seed: int, samples: int) -> ByteSamples:  # noqa: ARG001
    held_out = corpus_bytes(CORPUS_MAX_BYTES + samples * data.seq_len + 1)[CORPUS_MAX_BYTES:]
    return ByteSamples(held_out, data.seq_len)


def prepared_eval_source(data: DataSpec, *, vocab_size: int, seed: int, samples: int) -> PreparedSource:  # noqa: ARG001
    source = make_eval_source(data, seq_len=data.seq_len, vocab_size=vocab_size)
    if source is None:
        raise ValueError(f"training.eval: the prepared data in data.path {data.path} has no eval split "
                         "(prepare it with data.prepare.evalFraction or evalInputs)")
    return source


EVAL_SOURCES = {"synthetic": synthetic_eval_source, "corpus": corpus_eval_source, "prepared": prepared_eval_source}


def eval_source(data: DataSpec, *, vocab_size: int, seed: int, samples: int):
    """The eval split of ``data.source`` (``len`` and ``[i]`` as the training sources), with at
    least ``samples`` samples where the split is generated; a ValueError where it has none."""
    make = EVAL_SOURCES.get(data.source)
    if make is None:
        raise ValueError(f"training.eval: data.source {data.source} has no eval split "
                         f"(sources with one: {', '.join(sorted(EVAL_SOURCES))})")
    return make(data, vocab_size=vocab_size, seed=seed, samples=samples)


# ---------------------------------------------------------------- the loop


def token_loss_totals(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[sum of cross-entropy over counted labels, their count] in float64."""
    total = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX,
                            reduction="sum")
    count = (labels != IGNORE_INDEX).sum()
    return torch.stack([total.double(), count.double()])


def stage_owners(pp: int, schedule: str, virtual_stages: int) -> list[int]:
    """The pipeline rank holding each stage, by stage index."""
    owners = {sid: rank for rank in range(pp) for sid in stage_ids_for_rank(rank, pp, schedule, virtual_stages)}
    return [owners[sid] for sid in range(num_stages(pp, schedule, virtual_stages))]


def schedule_can_eval(owners: list[int]) -> bool:
    """Whether the schedule's own ``eval`` runs this placement: where two adjacent stages share a
    rank (a V: ZBVZeroBubble), torch's runtime hands the backward's gradient between them even in
    eval, and fails."""
    return all(a != b for a, b in zip(owners, owners[1:], strict=False))


def schedule_logits(pipeline, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
    """Forward of every microbatch through the pipeline schedule (its ``eval``: no backward); the
    merged logits on ranks holding the last stage, None elsewhere. The target goes in because a
    schedule with a loss computes it on the last stage."""
    kwargs = {"target": labels} if pipeline.has_last else {}
    args = (inputs,) if pipeline.has_first else ()
    out = pipeline.schedule.eval(*args, **kwargs)
    return out if pipeline.has_last else None


HEADER_LEN = 8  # an activation's header: [ndim, dtype code, *shape], zero-padded
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


@dataclass
class StagewiseForward:
    """Each stage's forward, in stage order, one microbatch at a time; activations go between
    ranks over the pipeline group (a header with shape and dtype first). Every rank sends and
    receives in stage order, so each send meets its receive."""

    stages: dict[int, nn.Module]  # stage index → module, the stages held here
    owners: list[int]
    group: dist.ProcessGroup
    microbatches: int
    device: torch.device

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor | None:
        """The logits of ``inputs`` on the rank holding the last stage, None elsewhere."""
        last = len(self.owners) - 1
        chunks = []
        for x in inputs.tensor_split(self.microbatches):
            h = None
            for sid, module in sorted(self.stages.items()):
                if sid > 0 and sid - 1 not in self.stages:
                    h = self._recv(self.owners[sid - 1])
                h = module(x if sid == 0 else h)
                if sid < last and sid + 1 not in self.stages:
                    self._send(h, self.owners[sid + 1])
            if last in self.stages:
                chunks.append(h)
        return torch.cat(chunks) if chunks else None

    def _send(self, tensor: torch.Tensor, peer: int) -> None:
        header = torch.zeros(HEADER_LEN, dtype=torch.int64)
        header[0], header[1] = tensor.dim(), DTYPES.index(tensor.dtype)
        header[2:2 + tensor.dim()] = torch.tensor(tensor.shape)
        dist.send(header.to(self.device), group=self.group, group_dst=peer)
        dist.send(tensor.contiguous(), group=self.group, group_dst=peer)

    def _recv(self, peer: int) -> torch.Tensor:
        header = torch.zeros(HEADER_LEN, dtype=torch.int64, device=self.device)
        dist.recv(header, group=self.group, group_src=peer)
        ndim, dtype = int(header[0]), DTYPES[int(header[1])]
        tensor = torch.empty(header[2:2 + ndim].tolist(), dtype=dtype, device=self.device)
        dist.recv(tensor, group=self.group, group_src=peer)
        return tensor


@dataclass
class Evaluator:
    """Collective: every rank evaluates together (``evaluate`` all-reduces over the world)."""

    spec: EvalSpec
    loader: DataLoader
    batches: int
    parts: list[nn.Module]
    pipeline: object | None  # distributed.pipeline.PipelineRunner
    stagewise: StagewiseForward | None  # a pipeline whose schedule cannot eval
    micro_batch: int
    device: torch.device
    autocast: contextlib.AbstractContextManager

    def due(self, step: int, total_steps: int) -> bool:
        return eval_due(step, total_steps, self.spec.every_steps)

    def evaluate(self) -> float:
        """eval_loss over ``batches`` global batches (NaN when no label counts)."""
        self.loader.step = 0  # the same batches every time
        modes = [part.training for part in self.parts]
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)
        try:
            for part in self.parts:
                part.eval()
            with torch.no_grad():
                for _ in range(self.batches):
                    inputs, labels = self.loader.next_batch()
                    totals += self._batch_totals(inputs.to(self.device), labels.to(self.device))
        finally:
            for part, mode in zip(self.parts, modes, strict=True):
                part.train(mode)
        dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        total, count = float(totals[0]), float(totals[1])
        return total / count if count > 0 else math.nan

    def _batch_totals(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)
        if self.pipeline is not None:
            with self.autocast:
                if self.stagewise is not None:
                    logits = self.stagewise(inputs)
                else:
                    logits = schedule_logits(self.pipeline, inputs, labels)
            return token_loss_totals(logits, labels) if logits is not None else totals
        for x, y in zip(inputs.split(self.micro_batch), labels.split(self.micro_batch), strict=True):
            with self.autocast:
                logits = self.parts[0](x)
            totals += token_loss_totals(logits, y)
        return totals


def build_stagewise(parallelism: Parallelism, *, stage_ids: list[int], parts: list[nn.Module], group,
                    device: torch.device) -> StagewiseForward | None:
    """The hand-run forward for a pipeline whose schedule cannot eval; None for the others."""
    owners = stage_owners(parallelism.pipeline, parallelism.pipeline_schedule, parallelism.virtual_stages)
    if schedule_can_eval(owners):
        return None
    return StagewiseForward(dict(zip(stage_ids, parts, strict=True)), owners, group, parallelism.microbatches, device)


def build_evaluator(spec: JobSpec, *, vocab_size: int, parallel_dims, parts: list[nn.Module], stage_ids: list[int],
                    pipeline, device: torch.device, autocast) -> Evaluator:
    """The evaluator of ``spec.training.eval`` over ``spec.data``'s eval split, sharded by
    data-parallel rank as training is (``parallel_dims``: distributed.parallel_dims.ParallelDims)."""
    tr, pd = spec.training, parallel_dims
    global_batch = tr.global_batch_size
    source = eval_source(spec.data, vocab_size=vocab_size, seed=tr.seed, samples=max(tr.eval.batches, 1) * global_batch)
    batches = eval_batch_count(tr.eval, len(source), global_batch)
    if batches < tr.eval.batches and pd.dp_rank == 0:
        log.warning("training.eval.batches %d: the eval split holds %d global batches; evaluating on those",
                    tr.eval.batches, batches)
    loader = DataLoader(source, global_batch=global_batch, dp_rank=pd.dp_rank, dp_size=pd.layout.dp, seed=tr.seed,
                        shuffle=False)
    stagewise = None
    if pipeline is not None:
        stagewise = build_stagewise(spec.parallelism, stage_ids=stage_ids, parts=parts, group=pd.group("pp"),
                                    device=device)
    return Evaluator(tr.eval, loader, batches, parts, pipeline, stagewise, tr.micro_batch_size, device, autocast)
