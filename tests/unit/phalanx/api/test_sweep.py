"""The TrainingSweep CRD generated from the pydantic API (and its drift), and the CLI on sweeps:
`phalanx validate|render` and `phalanx crd --sweep`."""

from __future__ import annotations

from pathlib import Path

import yaml

from phalanx.api.sweep import (
    OPERATOR_RULES,
    TrainingSweepSpec,
    build_sweep_crd,
    sweep_crd_yaml,
    sweep_reference,
)
from phalanx.cli import main
from tests.unit.phalanx.api.test_crd import _walk  # the CRD schema, node by node

ROOT = Path(__file__).resolve().parents[4]
CRD_FILE = ROOT / "crds" / "phalanx.dev_trainingsweeps.yaml"
EXAMPLE = ROOT / "examples" / "sweep-lr.yaml"


def test_crd_files_match_models():
    assert CRD_FILE.read_text() == sweep_crd_yaml(), "crds/ drifted from the API models: run `make crds`"
    chart = ROOT / "charts" / "phalanx" / "crds" / CRD_FILE.name
    assert chart.read_text() == sweep_crd_yaml(), "charts/phalanx/crds drifted: run `make crds`"
    assert sweep_reference() in (ROOT / "docs" / "api.md").read_text(), "docs/api.md drifted: run `make crds`"


def test_names_printer_columns_and_status_subresource():
    crd = build_sweep_crd()
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == ("TrainingSweep", "trainingsweeps", ["tsw"])
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Phase", "Done", "Running", "Stopped", "Best", "Value", "Age"]


def test_schema_is_structural_and_template_is_the_trainingjob_spec():
    root = build_sweep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(root):
        assert "$ref" not in node and "anyOf" not in node and "propertyNames" not in node, path
        assert "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields"), path
    template = root["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    assert template["required"] == ["image"] and "parallelism" in template["properties"]
    spec = root["properties"]["spec"]
    assert spec["properties"]["maxParallel"]["minimum"] == 1
    rules = spec["x-kubernetes-validations"]
    immutable = [r for r in rules if r.get("reason") == "FieldValueForbidden"]
    assert len(immutable) == 1 and "maxParallel" not in immutable[0]["rule"] and "self.template == oldSelf.template" in immutable[0]["rule"]


def test_every_cel_rule_has_a_python_twin():
    twins = {r.cel for cls in (TrainingSweepSpec,) for r in cls.checks}
    from phalanx.api.sweep import ParameterRange

    twins |= {r.cel for r in ParameterRange.checks}
    spec = build_sweep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    found = []

    def walk(node, in_template=False):
        if isinstance(node, dict):
            if not in_template:
                found.extend(node.get("x-kubernetes-validations", []))
            for key, value in node.items():
                walk(value, in_template or key == "template")
        elif isinstance(node, list):
            for value in node:
                walk(value, in_template)

    walk(spec)
    for rule in found:
        if rule.get("reason") == "FieldValueForbidden" or rule["message"].startswith("must be "):
            continue
        assert rule["rule"] in twins, rule
    assert all(r.cel is None for r in OPERATOR_RULES)


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


def test_watch_lines():
    from phalanx.sweep.local import trial_line
    from phalanx.sweep.watch import sweep_line

    status = {"phase": "Running", "progress": "1/4", "runningTrials": 2, "stoppedTrials": 1,
              "bestTrial": {"name": "lr-0", "value": 3.14159}}
    assert sweep_line(status) == "Running     done 1/4  running 2  stopped 1  best lr-0 3.1416"
    line = trial_line({"name": "lr-1", "phase": "Stopped", "step": 12, "value": 5.0, "parameters": {"training.lr": 1e-05}})
    assert line.split() == ["lr-1", "Stopped", "step", "12", "value", "5.0000", "training.lr=1e-05"]


def test_watch_sweep_prefix_routes_to_the_sweep_watcher(monkeypatch):
    import argparse

    from phalanx.sweep import cli as sweep_cli

    args = argparse.Namespace(job="train-job", sweep=False)
    assert sweep_cli.watch(args) is None  # a TrainingJob: the job watcher
