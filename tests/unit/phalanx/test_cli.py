"""The `phalanx` command (phalanx/cli.py): its subcommands, what each generated file flag prints,
and the exit codes of bad input."""

from __future__ import annotations

import sys

import pytest

from phalanx.cli import build_parser, export_argv, main
from phalanx.plan import EXIT_INPUT_ERROR, EXIT_PLACED
from tests.unit.phalanx.test_plan import JOB, NODES


def test_cli_gives_the_operators_verdict_before_planning(tmp_path, capsys):
    """`phalanx plan` exits 2 naming the field on a job the operator would refuse, like validate."""
    from phalanx.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(JOB.replace("procsPerNode: 8", "procsPerNode: 8\n  parallelism: {zero: 7}"))
    assert main(["plan", str(bad), "--nodes", NODES]) == EXIT_INPUT_ERROR
    assert "zero" in capsys.readouterr().err
    not_a_job = tmp_path / "cm.yaml"
    not_a_job.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["plan", str(not_a_job), "--nodes", NODES]) == EXIT_INPUT_ERROR
    good = tmp_path / "good.yaml"
    good.write_text(JOB + "  training: {globalBatchSize: 64}\n")
    assert main(["plan", str(good), "--nodes", NODES]) == EXIT_PLACED



def test_the_parser_has_every_subcommand_the_module_names():
    import phalanx.cli

    names = phalanx.cli.__doc__.split(":", 1)[1].split(".")[0].split("|")
    commands = build_parser()._subparsers._group_actions[0].choices
    assert sorted(commands) == sorted(name.strip() for name in names)


def test_the_operators_namespaces_are_one_list_or_all_never_both(capsys):
    parser = build_parser()
    args = parser.parse_args(["operator", "-n", "a", "-n", "b"])
    assert args.namespace == ["a", "b"] and not args.all_namespaces
    assert parser.parse_args(["operator", "-A"]).all_namespaces
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["operator", "-n", "a", "-A"])
    assert exited.value.code == 2 and "not allowed with" in capsys.readouterr().err


def _generated(flag):
    from phalanx.api.chartschema import values_schema_json
    from phalanx.api.crd import crd_yaml
    from phalanx.api.reference import api_reference
    from phalanx.api.sweep import sweep_crd_yaml
    from phalanx.policy.admission import admission_policy_template
    from phalanx.policy.reference import policy_reference

    return {None: crd_yaml, "--reference": api_reference, "--policy-reference": policy_reference,
            "--admission-policy": admission_policy_template, "--values-schema": values_schema_json,
            "--sweep": sweep_crd_yaml}[flag]()


@pytest.mark.parametrize("flag", [None, "--reference", "--policy-reference", "--admission-policy", "--values-schema", "--sweep"])
def test_crd_prints_the_file_its_flag_names(flag, capsys):
    assert main(["crd", *([flag] if flag else [])]) == 0
    assert capsys.readouterr().out == _generated(flag)


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("argv, code, message", [
    (["validate", "{missing}"], 2, "no such file"),
    (["render", "{bad_yaml}"], 2, "error: invalid YAML"),
    (["validate", "{tmp}"], 2, "Is a directory"),
    (["crd", "--check"], 2, "--check goes with --docs-tables"),
    (["plan", "{two_jobs}", "--nodes", NODES], EXIT_INPUT_ERROR, "expected one TrainingJob, found 2 documents"),
    (["plot", "{run_dir}"], 2, "metrics.jsonl: no such file"),  # no log written
    (["plot", "{empty_log}"], 1, "no steps logged"),
])
def test_bad_input_exits_with_its_code_and_says_why(tmp_path, capsys, argv, code, message):
    (tmp_path / "run").mkdir()
    files = {"missing": str(tmp_path / "missing.yaml"), "tmp": str(tmp_path), "run_dir": str(tmp_path / "run"),
             "bad_yaml": _write(tmp_path, "bad.yaml", "a: [1, 2\n"),
             "two_jobs": _write(tmp_path, "two.yaml", JOB + "\n---\n" + JOB),
             "empty_log": _write(tmp_path, "metrics.jsonl", "")}
    assert main([arg.format(**files) for arg in argv]) == code
    assert message in capsys.readouterr().err


# `phalanx export`: the runtime's exporter run as a process of its own, its options passed on.


@pytest.mark.parametrize(("extra", "passed"), [
    ([], []),
    (["--step", "40"], ["--step=40"]),
    (["--adapter-only"], ["--adapter-only"]),
    (["--merge-lora", "--max-shard-size", "2GB"], ["--merge-lora", "--max-shard-size=2GB"]),
    (["--base", "/models/base"], ["--base=/models/base"]),
    (["--dtype", "bfloat16"], ["--dtype=bfloat16"]),
])
def test_export_runs_the_runtime_module_with_the_options_given(extra, passed):
    args = build_parser().parse_args(["export", "/ckpt/ns/job", "--out", "/models/job", *extra])
    assert export_argv(args) == [sys.executable, "-m", "phalanx_runtime.export", "--out=/models/job", *passed,
                                 "--", "/ckpt/ns/job"]


def test_export_passes_paths_that_start_with_a_dash_as_paths():
    import argparse

    args = build_parser().parse_args(["export", "./-ckpt", "--out=-out", "--base=-base"])
    argv = export_argv(args)
    assert argv[-2:] == ["--", "./-ckpt"] and "--out=-out" in argv and "--base=-base" in argv
    # the runtime's own parser reads them back as the same paths
    runtime = argparse.ArgumentParser()
    runtime.add_argument("ckpt")
    runtime.add_argument("--out")
    runtime.add_argument("--base")
    runtime.add_argument("--step")
    parsed = runtime.parse_args([*argv[3:-2], "--", "-ckpt"])
    assert (parsed.ckpt, parsed.out, parsed.base) == ("-ckpt", "-out", "-base")


def test_export_without_the_runtime_says_what_to_install(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "safetensors" else real(name, *a))
    monkeypatch.setattr("subprocess.call", lambda argv: pytest.fail("ran the exporter"))
    assert main(["export", "/ckpt", "--out", "/out"]) == 1
    assert "pip install 'phalanx[runtime,hf]'" in capsys.readouterr().err


def test_export_returns_the_exporters_exit_code(monkeypatch):
    calls = []
    monkeypatch.setattr("subprocess.call", lambda argv: calls.append(argv) or 1)
    assert main(["export", "/ckpt", "--out", "/out"]) == 1
    assert calls and calls[0][1:3] == ["-m", "phalanx_runtime.export"]


def test_merge_and_adapter_only_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["export", "/ckpt", "--out", "/out", "--merge-lora", "--adapter-only"])
    assert "not allowed with" in capsys.readouterr().err


def test_data_prepare_runs_the_runtime_module(monkeypatch):
    """`phalanx data prepare`: the runtime's module in a subprocess (never imported), every flag passed on."""
    import subprocess
    import sys

    calls = []
    monkeypatch.setattr(subprocess, "run", lambda argv, check: calls.append(argv) or subprocess.CompletedProcess(argv, 3))
    code = main(["data", "prepare", "--input", "a.jsonl", "--input", "b/*.parquet", "--out", "DIR", "--tokenizer", "TOK",
                 "--messages-field", "messages", "--eval-fraction", "0.05", "--eval-input", "held.jsonl",
                 "--format", "jsonl", "--text-field", "body"])
    assert code == 3  # the module's exit status
    (argv,) = calls
    assert argv[:3] == [sys.executable, "-m", "phalanx_runtime.data.prepare"]
    flags = argv[3:]
    assert "--out=DIR" in flags and "--tokenizer=TOK" in flags
    assert "--input=a.jsonl" in flags and "--input=b/*.parquet" in flags and "--eval-input=held.jsonl" in flags
    assert "--messages-field=messages" in flags
    assert "--eval-fraction=0.05" in flags and "--format=jsonl" in flags
    assert "--text-field=body" in flags


def test_data_prepare_needs_inputs_out_and_tokenizer(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["data", "prepare", "--out", "DIR", "--tokenizer", "TOK"])
    assert exc.value.code == 2 and "--input" in capsys.readouterr().err
