"""spec.parallelism.parameterServer: its rules, each naming its field (the CEL twins are in the
CRD; tests/corpus.py feeds the one-verdict tests), and the layout it implies."""

from __future__ import annotations

from phalanx.api.rules import broken_rules
from phalanx.api.types import TrainingJobSpec
from phalanx_common.layout import check_layout


def spec(par: dict, **over) -> TrainingJobSpec:
    s = {"image": "x", "nodes": 1, "procsPerNode": 3, "model": {"preset": "debug"},
         "training": {"globalBatchSize": 8, "microBatchSize": 2}, "parallelism": par, **over}
    return TrainingJobSpec.model_validate(s)


def broken(s: TrainingJobSpec) -> dict[str, str]:
    return {path: msg for path, msg, _ in broken_rules(s, "spec")}


def test_a_valid_job_has_workers_as_data_parallel_ranks():
    s = spec({"parameterServer": {"servers": 1, "mode": "async", "staleness": 2}})
    assert broken(s) == {}
    assert s.data_degree == 2
    assert check_layout(s, cuda_available=False) == []


def test_each_rule_names_its_field():
    assert set(broken(spec({"parameterServer": {"servers": 3}}))) == {"spec.parallelism.parameterServer.servers"}
    assert "spec.parallelism.parameterServer.staleness" in broken(spec({"parameterServer": {"staleness": 1}}))
    for field, value in (("zero", 1), ("tensor", 3), ("pipeline", 3), ("data", 2)):
        errs = broken(spec({field: value, "parameterServer": {}}))
        assert f"spec.parallelism.{field}" in errs and "parameterServer" in errs[f"spec.parallelism.{field}"]
    cmd = spec({"parameterServer": {}}, model=None, command=["python", "x.py"])
    assert "model" in broken(cmd)["spec.parallelism.parameterServer"]
    assert "spec.elastic" in broken(spec({"parameterServer": {}}, elastic={"minNodes": 1, "maxNodes": 2}))
    assert "spec.training.gradCompression" in broken(
        spec({"parameterServer": {}}, training={"globalBatchSize": 8, "microBatchSize": 2, "gradCompression": "bf16"}))


def test_batch_must_split_over_the_workers():
    s = spec({"parameterServer": {"servers": 1}}, procsPerNode=4)  # 3 workers
    assert any(e.startswith("training.globalBatchSize") for e in check_layout(s, cuda_available=False))
