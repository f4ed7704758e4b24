"""Shared specs for the runtime parity tests and benchmarks."""

from __future__ import annotations

import copy

TINY_OVERRIDES = {"dim": 32, "nLayers": 4, "nHeads": 4, "nKvHeads": 2, "ffnHidden": 64, "vocabSize": 256}


def job(parallelism: dict | None = None, *, world: int = 1, nodes: int = 1, steps: int = 10,
        training: dict | None = None, overrides: dict | None = None, seq_len: int = 16) -> dict:
    tr = {"steps": steps, "globalBatchSize": 8, "microBatchSize": 2, "lr": 3e-3, "precision": "fp32",
          "gradClip": 1.0, "seed": 7, "lrSchedule": {"warmupSteps": 2, "decay": "cosine"}}
    tr.update(training or {})
    return {"apiVersion": "phalanx.dev/v1alpha1", "metadata": {"name": "parity", "namespace": "default"},
            "spec": {"image": "phalanx:test", "nodes": nodes, "procsPerNode": world // nodes,
                     "parallelism": copy.deepcopy(parallelism or {}),
                     "model": {"preset": "debug", "overrides": {**TINY_OVERRIDES, **(overrides or {})}},
                     "data": {"source": "synthetic", "seqLen": seq_len}, "training": tr}}


def max_rel(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b, strict=True))
