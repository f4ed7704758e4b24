"""Preparation end to end: idempotence, each bad input refused naming its field and flag, the command line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("numpy")

from phalanx_runtime.data.options import PrepareError, PrepareOptions  # noqa: E402
from phalanx_runtime.data.prepare import main, prepare  # noqa: E402
from tests.unit.phalanx_runtime.data.util import write_jsonl  # noqa: E402


def test_idempotent_until_inputs_or_options_change(tokenizers_dir, tmp_path):
    data = write_jsonl(tmp_path / "t.jsonl", [{"text": f"hello {i}"} for i in range(20)])
    options = PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tokenizers_dir["chatml"]))
    meta, wrote = prepare(options)
    assert wrote
    stamp = (tmp_path / "out" / "train.bin").stat().st_mtime_ns
    again, wrote = prepare(options)
    assert not wrote and again == meta and (tmp_path / "out" / "train.bin").stat().st_mtime_ns == stamp
    _, wrote = prepare(PrepareOptions(**{**options.__dict__, "eval_fraction": 0.5}))
    assert wrote and (tmp_path / "out" / "eval.bin").exists()
    with open(data, "a") as f:
        f.write(json.dumps({"text": "one more document"}) + "\n")
    meta, wrote = prepare(options)
    assert wrote and meta["splits"]["train"]["documents"] == 21
    assert not (tmp_path / "out" / "eval.bin").exists()  # a stale split of the earlier preparation is gone
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".prepare-tmp-")]


BAD_INPUTS = {
    # case: (files to write, options, the message's start)
    "missing text field": ({"d.jsonl": '{"body": "x"}\n'}, {}, r"data.prepare.textField \(--text-field\): .*d.jsonl line 1: no field 'text'"),
    "text not a string": ({"d.jsonl": '{"text": 3}\n'}, {}, r"data.prepare.textField \(--text-field\): .*a int in field 'text'"),
    "messages not a list": ({"d.jsonl": '{"messages": "hi"}\n'}, {"messages_field": "messages"}, r"data.prepare.messagesField \(--messages-field\): .*not a list"),
    "not json": ({"d.jsonl": '{"text": \n'}, {}, r"data.prepare.format \(--format\): .*d.jsonl line 1: not JSON"),
    "unknown extension": ({"d.csv": "a,b\n"}, {}, r"data.prepare.inputs \(--input\): .*d.csv: format unknown"),
    "missing input": ({}, {"inputs": ("nope.jsonl",)}, r"data.prepare.inputs \(--input\): nope.jsonl: no such file"),
    "missing eval input": ({"d.jsonl": '{"text": "x"}\n'}, {"eval_inputs": ("gone.jsonl",)}, r"data.prepare.evalInputs \(--eval-input\): gone.jsonl"),
    "eval fraction": ({"d.jsonl": '{"text": "x"}\n'}, {"eval_fraction": 1.5}, r"data.prepare.evalFraction \(--eval-fraction\): 1.5 is not in \[0, 1\)"),
    "unknown format": ({"d.jsonl": '{"text": "x"}\n'}, {"format": "csv"}, r"data.prepare.format \(--format\): 'csv'"),
    "no tokenizer.json": ({"d.jsonl": '{"text": "x"}\n'}, {"tokenizer": "."}, r"data.prepare.tokenizer \(--tokenizer\): .*no tokenizer.json"),
    "chat from text files": ({"d.txt": "hello"}, {"messages_field": "messages"}, r"data.prepare.messagesField \(--messages-field\): .*text file holds no fields"),
    "parquet column": ({"d.parquet": None}, {"text_field": "body"}, r"data.prepare.textField \(--text-field\): .*has no column 'body' \(columns: text\)"),
    "datasets dict": ({"dd/dataset_dict.json": '{"splits": ["train"]}'}, {"inputs": ("dd",)}, r"data.prepare.inputs \(--input\): .*DatasetDict: name one split"),
    "no documents": ({"d.jsonl": "\n"}, {}, r"data.prepare.inputs \(--input\): no documents"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_names_the_field(case, tokenizers_dir, tmp_path, monkeypatch):
    files, overrides, message = BAD_INPUTS[case]
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"text": ["x"]}), name)
        else:
            Path(name).write_text(text)
    options = {"inputs": tuple(files)[:1], "out": "out", "tokenizer": str(tokenizers_dir["chatml"]), **overrides}
    with pytest.raises(PrepareError, match=message):
        prepare(PrepareOptions(**options))
    assert not Path("out", "meta.json").exists()


def test_command_line(tokenizers_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "t.jsonl", [{"text": f"hello {i}"} for i in range(10)])
    args = ["--input", str(data), "--out", str(tmp_path / "out"), "--tokenizer", str(tokenizers_dir["chatml"])]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["splits"]["train"]["documents"] == 10
    assert main(args) == 0 and "already prepared" in capsys.readouterr().err
    assert main(args + ["--eval-fraction", "2"]) == 1
    assert "error: data.prepare.evalFraction (--eval-fraction)" in capsys.readouterr().err
    assert os.path.exists(tmp_path / "out" / "meta.json")
