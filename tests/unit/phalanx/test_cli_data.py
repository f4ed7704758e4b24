"""`phalanx data prepare`: the runtime's preparation module in a subprocess, every flag passed on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from phalanx.cli import main


def test_data_prepare_runs_the_runtime_module(monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda argv, check: calls.append(argv) or subprocess.CompletedProcess(argv, 3))
    code = main(["data", "prepare", "--input", "a.jsonl", "--input", "b/*.parquet", "--out", "DIR", "--tokenizer", "TOK",
                 "--messages-field", "messages", "--eval-fraction", "0.05", "--eval-input", "held.jsonl",
                 "--format", "jsonl", "--text-field", "body"])
    assert code == 3  # the module's exit status
    (argv,) = calls
    assert argv[:3] == [sys.executable, "-m", "phalanx_runtime.data.prepare"]
    flags = argv[3:]
    assert flags[flags.index("--out") + 1] == "DIR" and flags[flags.index("--tokenizer") + 1] == "TOK"
    assert "--input=a.jsonl" in flags and "--input=b/*.parquet" in flags and "--eval-input=held.jsonl" in flags
    assert flags[flags.index("--messages-field") + 1] == "messages"
    assert flags[flags.index("--eval-fraction") + 1] == "0.05" and flags[flags.index("--format") + 1] == "jsonl"
    assert flags[flags.index("--text-field") + 1] == "body"


def test_data_prepare_needs_inputs_out_and_tokenizer(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["data", "prepare", "--out", "DIR", "--tokenizer", "TOK"])
    assert exc.value.code == 2 and "--input" in capsys.readouterr().err
