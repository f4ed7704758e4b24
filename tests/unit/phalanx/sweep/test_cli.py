"""The CLI on sweeps: `phalanx validate|render` on files with TrainingSweeps, `phalanx crd --sweep`,
and `phalanx watch` routing a sweep to the sweep watcher."""

from __future__ import annotations

from pathlib import Path

import yaml

from phalanx.api.sweep import sweep_crd_yaml
from phalanx.cli import main

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "sweep-lr.yaml"


def test_validate_example_and_render_trials(capsys):
    assert main(["validate", str(EXAMPLE)]) == 0
    assert "TrainingSweep lr-sweep: valid (4 trials)" in capsys.readouterr().out
    assert main(["render", str(EXAMPLE)]) == 0
    jobs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [j["metadata"]["name"] for j in jobs] == ["lr-sweep-0", "lr-sweep-1", "lr-sweep-2", "lr-sweep-3",
                                                     "seeds-0", "seeds-1", "seeds-2"]
    assert [j["spec"]["training"]["seed"] for j in jobs[4:]] == [100, 101, 102]


def test_validate_refuses_a_bad_sweep_naming_parameter_and_value(tmp_path, capsys):
    obj = yaml.safe_load_all(EXAMPLE.read_text()).__next__()
    obj["spec"]["parameters"][0]["values"].append("fast")
    obj["spec"]["parameters"].append({"path": "training.lrr", "values": [1]})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(obj))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "TrainingSweep lr-sweep: spec.parameters[1].path: training.lrr: unknown field 'lrr'" in err
    assert main(["validate", str(path)]) == 1  # deterministic


def test_validate_a_file_of_sweeps_and_jobs(tmp_path, capsys):
    job = yaml.safe_load((ROOT / "examples" / "cpu-3d-demo.yaml").read_text())
    path = tmp_path / "both.yaml"
    path.write_text(EXAMPLE.read_text() + "\n---\n" + yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "TrainingJob demo-3d: valid" in out and "TrainingSweep seeds: valid" in out


def test_crd_sweep_flag(tmp_path):
    out = tmp_path / "crd.yaml"
    assert main(["crd", "--sweep", "-o", str(out)]) == 0
    assert out.read_text() == sweep_crd_yaml()


def test_watch_sweep_prefix_routes_to_the_sweep_watcher(monkeypatch):
    import argparse

    from phalanx.sweep import cli as sweep_cli

    args = argparse.Namespace(job="train-job", sweep=False)
    assert sweep_cli.watch(args) is None  # a TrainingJob: the job watcher
