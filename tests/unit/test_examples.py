"""Every example and every doc snippet is a job the installed operator accepts, and every example
says at its top what it needs and whether it runs on the kind cluster.

The verdict is `phalanx validate --config <the chart's default operator config>`: the CLI itself
(``phalanx.cli.main``), on each file of examples/ and on each TrainingJob / TrainingSweep of the
```yaml blocks of README.md and docs/*.md. A block that is only a ``spec:`` mapping is a fragment:
it is wrapped into a TrainingJob (``spec.image`` added when absent) and checked too, so a fragment
must hold a whole valid spec apart from the image. Extraction and the header format:
tests/example_files.py. The kind half of the story runs in tests/e2e/test_examples.py.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from phalanx.api.config import OperatorConfig
from phalanx.cli import main
from tests.example_files import (
    CHART,
    EXAMPLES,
    KIND_IMAGE,
    ROOT,
    RUN_ELSEWHERE,
    chart_operator_config,
    doc_snippets,
    documents,
    header,
    kind_blockers,
    ours,
    snippets,
)

JOB_FILES = [p for p in EXAMPLES if any(ours(d) for d in documents(p))]
SNIPPETS = doc_snippets()


@pytest.fixture(scope="module")
def chart_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("chart") / "config.yaml"
    path.write_text(yaml.safe_dump(chart_operator_config()))
    return str(path)


def validate(path, config: str, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["validate", str(path), "--config", config])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.name)
def test_example_is_valid_under_the_charts_defaults(path, chart_config, capsys):
    code, err = validate(path, chart_config, capsys)
    assert (code, err) == (0, "")


@pytest.mark.parametrize(("where", "doc"), SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_doc_snippet_is_valid_under_the_charts_defaults(where, doc, chart_config, capsys, tmp_path):
    path = tmp_path / "snippet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, err = validate(path, chart_config, capsys)
    assert (code, err) == (0, ""), f"{where}: {err}"


def test_the_docs_have_snippets_to_check():
    assert any(w.startswith("README.md:") for w, _ in SNIPPETS), "no TrainingJob found in README.md"
    assert len(SNIPPETS) >= 4, SNIPPETS


def test_snippets_are_found_and_fragments_wrapped():
    text = ("text\n```yaml\napiVersion: phalanx.dev/v1alpha1\nkind: TrainingSweep\nmetadata: {name: s}\n```\n"
            "```yaml\nspec:\n  nodes: 2\n```\n"
            "```yaml\napiVersion: v1\nkind: PersistentVolumeClaim\n```\n"
            "```sh\nkubectl apply -f job.yaml\n```\n"
            "```yaml\nenv:\n- {name: A, value: b}\n```\n")
    found = snippets(text, "doc.md")
    assert [w for w, _ in found] == ["doc.md:2", "doc.md:7"]
    assert found[1][1] == {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "fragment"},
                           "spec": {"image": KIND_IMAGE, "nodes": 2}}


def test_a_job_that_asks_for_checkpoints_without_a_volume_is_refused_naming_the_field(chart_config, capsys, tmp_path):
    doc = documents(next(p for p in EXAMPLES if p.name == "first-job.yaml"))[0]
    doc["spec"]["checkpoint"] = {"intervalSteps": 10, "keepLast": 3}  # keepLast 3 is the default: fine
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, err = validate(path, chart_config, capsys)
    assert code == 1
    assert err.splitlines() == [f"error: {path}: TrainingJob first-job: spec.checkpoint.intervalSteps: needs "
                                "checkpoint.volume or checkpoint.storage: a job without one saves no checkpoints (set "
                                "checkpoint.volume, e.g. {persistentVolumeClaim: {claimName: ckpt}}, or checkpoint.storage.uri, "
                                "e.g. s3://bucket/prefix, or leave intervalSteps at its default 0)"]


# --- Headers: what each example needs, and whether it runs on kind -----------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_starts_with_its_header(path):
    h = header(path)
    assert h.markers == 1, f"{path.name}: want one '# Runs on kind: yes|no …' line in the leading comments"
    if not h.runs_on_kind:
        assert re.match(r"— \S", h.why), f"{path.name}: '# Runs on kind: no — <why>'"
    if path in JOB_FILES:
        assert h.needs, f"{path.name}: a '# Needs: …' line says what a cluster must have"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_runs_on_kind_is_true_exactly_when_nothing_keeps_it_off(path):
    blockers = [b for d in documents(path) for b in kind_blockers(d)]
    runs = header(path).runs_on_kind
    assert runs == (not blockers), f"{path.name} says 'Runs on kind: {'yes' if runs else 'no'}'; blockers: {blockers}"


@pytest.mark.parametrize(("spec", "words"), [
    ({}, None),
    ({"nodes": 2, "resources": {"cpu": "500m", "memory": "2Gi"},
      "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "phalanx-shared"}}}}, None),
    ({"resources": {"gpus": 8}}, "8 GPUs"),
    ({"resources": {"cpu": "2"}}, "2 CPUs"),
    ({"resources": {"memory": "8Gi"}}, "8Gi of memory"),
    ({"resources": {"extra": {"rdma/hca": 1}}}, "rdma/hca"),
    ({"roles": [{"name": "ps", "resources": {"cpu": "16"}}]}, "role ps: 16 CPUs"),
    ({"nodes": 4}, "4 nodes"),
    ({"image": "tensorflow/tensorflow:2.21.0-gpu"}, "not loaded on kind"),
    ({"checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}}}, "PVC ckpt"),
    ({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}, "PVC data"),
    ({"scheduling": {"priorityClassName": "high"}}, "PriorityClass high"),
    ({"network": {"profile": "ib"}}, "network profile"),
])
def test_kind_blockers(spec, words):
    doc = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "j"},
           "spec": {"image": KIND_IMAGE, "nodes": 1, **spec}}
    blockers = kind_blockers(doc)
    assert (blockers == []) if words is None else (len(blockers) == 1 and words in blockers[0]), blockers
    sweep = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingSweep", "spec": {"template": {"spec": doc["spec"]}}}
    assert kind_blockers(sweep) == blockers
    assert kind_blockers({"apiVersion": "v1", "kind": "List"}) == ["not a TrainingJob or TrainingSweep"]


@pytest.mark.parametrize(("example", "test_file"), RUN_ELSEWHERE.items())
def test_examples_run_elsewhere_are_run_there_from_their_file(example, test_file):
    assert header(ROOT / "examples" / example).runs_on_kind
    assert f'"examples" / "{example}"' in (ROOT / test_file).read_text(), f"{test_file} does not run {example}"


def test_notes_suggest_a_first_job_that_runs_on_kind():
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    path = ROOT / re.search(r"kubectl apply -f (examples/\S+\.yaml)", notes).group(1)
    job = documents(path)[0]
    assert header(path).runs_on_kind and kind_blockers(job) == []
    assert f"phalanx watch {job['metadata']['name']} " in notes
    assert "volume" not in job["spec"].get("checkpoint", {}), "the first job needs no PVC"


@pytest.mark.built_last
@pytest.mark.usefixtures("cluster_build")
def test_the_chart_config_here_is_what_the_chart_renders():
    from localcluster.binaries import default_bin_dir

    helm = default_bin_dir() / "helm"
    if not helm.exists():
        pytest.skip("helm not built (hack/cluster/build.sh)")
    out = subprocess.run([str(helm), "template", "phalanx", str(CHART), "-n", "phalanx-system", "--show-only",
                          "templates/configmap.yaml"], check=True, capture_output=True, text=True).stdout
    rendered = yaml.safe_load(yaml.safe_load(out)["data"]["config.yaml"])
    assert json.dumps(rendered, sort_keys=True) == json.dumps(chart_operator_config(), sort_keys=True)
    assert OperatorConfig.model_validate(rendered) == OperatorConfig.model_validate(chart_operator_config())
