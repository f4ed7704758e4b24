"""Reading the user's YAML strictly and writing the manifests `phalanx render` prints."""

from __future__ import annotations

import io

import pytest
import yaml

from phalanx import constants
from phalanx.api.manifests import (
    InputError,
    document_name,
    dump_yaml_stream,
    is_job_attempt,
    load_operator_config,
    parse_documents,
    read_documents,
    read_jobs,
)

JOB = f"apiVersion: {constants.API_VERSION}\nkind: TrainingJob\nmetadata: {{name: a}}\nspec: {{image: img:1}}\n"


@pytest.mark.parametrize(("text", "docs"), [
    ("", []),
    ("---\n---\n", []),  # empty documents are skipped
    ("a: 1\n---\nb: 2\n", [{"a": 1}, {"b": 2}]),
    ("x: 1e-05\n", [{"x": "1e-05"}]),  # YAML 1.1: a string
    ('{"x": 1e-05}', [{"x": 1e-05}]),  # JSON is read as JSON
    ('[{"a": 1}, null, {"b": 2}]', [{"a": 1}, {"b": 2}]),  # a JSON list: its items
    ("{a: 1}", [{"a": 1}]),  # flow-style YAML that is not JSON
])
def test_parse_documents(text, docs):
    assert parse_documents(text) == docs


@pytest.mark.parametrize("text", ["a: 1\na: 2\n", "spec:\n  nodes: 1\n  nodes: 2\n", "1: x\n1: y\n"])
def test_a_duplicate_key_is_refused(text):
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key"):
        parse_documents(text)


def test_nesting_too_deep_is_an_input_error():
    with pytest.raises(InputError, match="nested too deeply"):
        parse_documents("a: " + "[" * 5000 + "]" * 5000)


@pytest.mark.parametrize(("doc", "name"), [
    ({"metadata": {"name": "a"}}, "a"),
    ({"metadata": {"generateName": "a-"}}, "a-"),
    ({"metadata": {}}, "?"),
    ({"metadata": "x"}, "?"),
    ({}, "?"),
])
def test_document_name(doc, name):
    assert document_name(doc) == name


@pytest.mark.parametrize(("doc", "attempt"), [
    ({"apiVersion": constants.API_VERSION, "kind": "TrainingJob"}, True),
    ({"kind": "TrainingJob"}, True),
    ({"apiVersion": f"{constants.GROUP}/v9", "kind": "TrainingJobs"}, True),  # meant as one: our group
    ({"apiVersion": "v1", "kind": "Pod"}, False),
    ("TrainingJob", False),
    (None, False),
])
def test_is_job_attempt(doc, attempt):
    assert is_job_attempt(doc) is attempt


def test_read_jobs_keeps_the_jobs(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n" + JOB)
    assert [d["metadata"]["name"] for d in read_jobs(str(path))] == ["a"]


@pytest.mark.parametrize(("text", "words"), [
    ("apiVersion: v1\nkind: Pod\n---\nkind: Service\n", "found kind Pod, Service"),
    ("just a string\n", "found no Kubernetes object"),
])
def test_read_jobs_without_a_job_says_what_it_found(tmp_path, text, words):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=words):
        read_jobs(str(path))


def test_dash_reads_stdin(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(JOB))
    assert read_documents("-")[0]["kind"] == "TrainingJob"


def test_load_operator_config(tmp_path):
    assert load_operator_config(None).model_dump() == load_operator_config("").model_dump()
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert list(load_operator_config(str(empty)).network_profiles) == ["default"]
    config = tmp_path / "config.yaml"
    config.write_text("podCreateConcurrency: 4\n")
    assert load_operator_config(str(config)).pod_create_concurrency == 4


def test_dump_keeps_key_order_and_writes_multi_line_strings_as_blocks():
    text = dump_yaml_stream([{"b": 1, "a": "one\ntwo\n"}, {"c": "x"}])
    assert text.index("b:") < text.index("a:")
    assert "a: |" in text and "---" in text
    assert list(yaml.safe_load_all(text)) == [{"b": 1, "a": "one\ntwo\n"}, {"c": "x"}]
