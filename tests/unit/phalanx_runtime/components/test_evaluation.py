"""Held-out evaluation's pure parts: when it runs, perplexity, how many batches, which samples
form each source's eval split, the pipeline placement that torch's schedules cannot evaluate, and
the token loss totals that make every layout's eval_loss the single-process value."""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F

from phalanx_runtime.components import evaluation
from phalanx_runtime.components.data import DataLoader, SyntheticSource, corpus_bytes
from phalanx_runtime.components.evaluation import (
    eval_batch_count,
    eval_due,
    eval_metrics,
    eval_source,
    perplexity,
    schedule_can_eval,
    stage_owners,
    token_loss_totals,
)
from phalanx_runtime.config import DataSpec, EvalSpec


@pytest.mark.parametrize("step,total,every,due", [
    (4, 10, 2, True),
    (5, 10, 2, False),
    (10, 10, 3, True),  # the last step, whatever the interval
    (9, 10, 3, True),
    (3, 10, 0, False),  # 0: only at the end
    (10, 10, 0, True),
    (1, 1, 0, True),
])
def test_eval_due(step, total, every, due):
    assert eval_due(step, total, every) is due


@pytest.mark.parametrize("loss,expected", [
    (0.0, 1.0),
    (2.0, math.exp(2.0)),
    (1000.0, sys.float_info.max),  # exp overflows: the largest finite float
])
def test_perplexity_is_exp_of_the_loss_and_finite(loss, expected):
    assert perplexity(loss) == pytest.approx(expected)
    assert eval_metrics(loss) == {"eval_loss": loss, "perplexity": perplexity(loss)}


def test_perplexity_of_nan_is_nan():
    assert math.isnan(perplexity(math.nan))


@pytest.mark.parametrize("batches,samples,global_batch,expected", [
    (4, 100, 8, 4),
    (4, 20, 8, 2),  # the split holds two global batches: no batch twice
    (1, 8, 8, 1),
])
def test_eval_batch_count(batches, samples, global_batch, expected):
    assert eval_batch_count(EvalSpec(every_steps=0, batches=batches), samples, global_batch) == expected


@pytest.mark.parametrize("spec,samples,field", [
    (EvalSpec(batches=2), 7, "training.eval: the eval split holds 7 samples, fewer than one global batch"),
    (EvalSpec(batches=0), 100, "training.eval.batches"),
    (EvalSpec(every_steps=-1), 100, "training.eval.everySteps"),
])
def test_eval_batch_count_refusals_name_the_field(spec, samples, field):
    with pytest.raises(ValueError) as e:
        eval_batch_count(spec, samples, 8)
    assert str(e.value).startswith(field)


def test_a_source_without_an_eval_split_is_refused_naming_both_fields():
    with pytest.raises(ValueError) as e:
        eval_source(DataSpec(source="tokens", path="/nonexistent"), vocab_size=256, seed=1, samples=8)
    assert "training.eval" in str(e.value) and "data.source tokens" in str(e.value)


def test_the_synthetic_eval_split_is_the_samples_after_the_training_ones():
    data = DataSpec(source="synthetic", seq_len=16)
    held_out = eval_source(data, vocab_size=256, seed=7, samples=16)
    train = SyntheticSource(256, 16, 7)
    assert len(held_out) == 16
    assert torch.equal(held_out[0], train[len(train)])
    assert torch.equal(held_out[15], train[len(train) + 15])
    with pytest.raises(IndexError):
        held_out[16]
    # training reads indices below len(train) only, in every epoch
    loader = DataLoader(train, global_batch=8, dp_rank=0, dp_size=1, seed=7)
    assert all(loader._index(k) < len(train) for k in (0, len(train) - 1, len(train), 3 * len(train) + 5))


def test_the_corpus_eval_split_is_the_bytes_after_the_training_corpus(monkeypatch):
    monkeypatch.setattr(evaluation, "CORPUS_MAX_BYTES", 4096)  # the training corpus: its first 4 KiB
    held_out = eval_source(DataSpec(source="corpus", seq_len=16), vocab_size=256, seed=1, samples=3)
    following = corpus_bytes(4096 + 3 * 16 + 1)[4096:]
    assert len(held_out) == 3
    assert held_out[0].tolist() == list(following[:17])
    assert held_out[2].tolist() == list(following[32:49])  # samples overlap by one token (the label)


def test_an_unshuffled_loader_reads_the_same_batches_from_its_start():
    source = eval_source(DataSpec(source="synthetic", seq_len=8), vocab_size=64, seed=3, samples=8)
    halves = [DataLoader(source, global_batch=8, dp_rank=r, dp_size=2, seed=3, shuffle=False) for r in (0, 1)]
    whole = DataLoader(source, global_batch=8, dp_rank=0, dp_size=1, seed=3, shuffle=False)
    inputs = torch.cat([h.next_batch()[0] for h in halves])
    assert torch.equal(inputs, whole.next_batch()[0])  # data-parallel ranks split the single-process batch
    assert torch.equal(inputs[0], source[0][:-1])


@pytest.mark.parametrize("pp,schedule,virtual,owners,can_eval", [
    (2, "1F1B", 1, [0, 1], True),
    (4, "GPipe", 1, [0, 1, 2, 3], True),
    (2, "Interleaved1F1B", 2, [0, 1, 0, 1], True),
    (2, "ZBVZeroBubble", 2, [0, 1, 1, 0], False),  # stages 1 and 2 on rank 1
    (3, "ZBVZeroBubble", 2, [0, 1, 2, 2, 1, 0], False),
])
def test_stage_owners_and_which_schedules_can_eval(pp, schedule, virtual, owners, can_eval):
    assert stage_owners(pp, schedule, virtual) == owners
    assert schedule_can_eval(owners) is can_eval


def test_token_loss_totals_skip_uncounted_labels_and_add_up_across_shards():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 6, 11, generator=gen)
    labels = torch.randint(0, 11, (4, 6), generator=gen)
    labels[0, :3] = -100
    labels[2, 5] = -100
    total, count = token_loss_totals(logits, labels).tolist()
    assert count == 24 - 4
    expected = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    assert total / count == pytest.approx(float(expected), rel=1e-6)
    # two shards' totals add up to the whole's: the ratio is the single-process mean
    shards = token_loss_totals(logits[:1], labels[:1]) + token_loss_totals(logits[1:], labels[1:])
    assert shards.tolist() == pytest.approx([total, count], rel=1e-6)
