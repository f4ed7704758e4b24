"""The runtime's metrics: eval_loss and perplexity on the step's metrics.jsonl line and as
Prometheus gauges that appear at the first evaluation."""

from __future__ import annotations

import json

import torch
from prometheus_client import generate_latest

from phalanx_runtime.components.metrics import (
    MetricsLogger,
    PromMetrics,
    exported_names,
    metric_labels,
)


def test_an_evaluation_lands_on_its_steps_line_only(tmp_path):
    path = tmp_path / "metrics.jsonl"
    logger = MetricsLogger(flops_per_token=None, peak_flops=1.0, world_size=1, tokens_per_step=16,
                           device=torch.device("cpu"), log_path=path)
    logger.record(step=1, loss=2.0, grad_norm=1.0, lr=0.1, step_time=0.5)
    logger.record(step=2, loss=1.5, grad_norm=1.0, lr=0.1, step_time=0.5,
                  evaluated={"eval_loss": 1.75, "perplexity": 5.75})
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert "eval_loss" not in first and "perplexity" not in first
    assert second["step"] == 2 and second["loss"] == 1.5
    assert second["eval_loss"] == 1.75 and second["perplexity"] == 5.75


def test_eval_gauges_appear_at_the_first_evaluation_and_hold_the_last():
    prom = PromMetrics(metric_labels("ml", "llm", 0))
    assert b"phalanx_runtime_eval_loss{" not in generate_latest(prom.registry)
    prom.record_eval({"eval_loss": 2.5, "perplexity": 12.2})
    prom.record_eval({"eval_loss": 2.25, "perplexity": 9.5})
    text = generate_latest(prom.registry).decode()
    assert 'phalanx_runtime_eval_loss{namespace="ml",rank="0",trainingjob="llm"} 2.25' in text
    assert 'phalanx_runtime_perplexity{namespace="ml",rank="0",trainingjob="llm"} 9.5' in text
    assert {"phalanx_runtime_eval_loss", "phalanx_runtime_perplexity"} <= exported_names()
