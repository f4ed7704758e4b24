"""Preparation end to end: idempotence, each bad input refused naming its field and flag, the command line."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("numpy")

from phalanx_runtime.data.options import MAX_EVAL_FRACTION, PrepareError, PrepareOptions  # noqa: E402
from phalanx_runtime.data.prepare import ensure_prepared, main, prepare  # noqa: E402
from phalanx_runtime.data.writer import TMP_PREFIX, preparation_lock  # noqa: E402
from tests.tiny_tokenizer import make_tokenizer_dir  # noqa: E402
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
    "eval fraction": ({"d.jsonl": '{"text": "x"}\n'}, {"eval_fraction": 1.5}, r"data.prepare.evalFraction \(--eval-fraction\): 1.5 is not in \[0, 0.5\]"),
    "eval fraction above the API's": ({"d.jsonl": '{"text": "x"}\n'}, {"eval_fraction": 0.7}, r"data.prepare.evalFraction \(--eval-fraction\): 0.7 is not in \[0, 0.5\]"),
    "chat in text format": ({"d.jsonl": '{"text": "x"}\n'}, {"format": "text", "messages_field": "m"}, r"data.prepare.messagesField \(--messages-field\): a text file holds no fields"),
    "out inside an input": ({"in/d.jsonl": '{"text": "x"}\n'}, {"inputs": ("in",), "out": "in/prepared"}, r"data.path \(--out\): in/prepared is inside the input in \(data.prepare.inputs\)"),
    "out inside an eval input": ({"d.jsonl": '{"text": "x"}\n', "held/e.jsonl": '{"text": "y"}\n'}, {"eval_inputs": ("held",), "out": "held"}, r"data.path \(--out\): held is inside the input held \(data.prepare.evalInputs\)"),
    "datasets file outside": ({"ds/state.json": '{"_data_files": [{"filename": "../d.arrow"}]}', "d.arrow": ""}, {"inputs": ("ds",)}, r"data.prepare.inputs \(--input\): .*state.json names a file outside ds: '../d.arrow'"),
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
    assert main(args + ["--eval-fraction", "0.6"]) == 1
    assert "error: data.prepare.evalFraction (--eval-fraction)" in capsys.readouterr().err
    assert os.path.exists(tmp_path / "out" / "meta.json")


def test_a_folder_holding_other_files_is_refused(tokenizers_dir, tmp_path):
    """Publication replaces the split files by name: an output folder that is neither empty nor a
    prepared directory is refused, its files untouched."""
    data = write_jsonl(tmp_path / "t.jsonl", [{"text": "hello"}])
    out = tmp_path / "home"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "train.bin").write_bytes(b"mine too")
    with pytest.raises(PrepareError, match=r"data.path \(--out\): .*home is not empty and holds no prepared data "
                                           r"\(no meta.json; it holds notes.txt\)"):
        prepare(PrepareOptions(inputs=(str(data),), out=str(out), tokenizer=str(tokenizers_dir["chatml"])))
    assert (out / "train.bin").read_bytes() == b"mine too" and (out / "notes.txt").exists()
    # a prepared directory (a file of the user's beside it) and the leftovers of an interrupted publication are fine
    (out / "notes.txt").unlink()
    _, wrote = prepare(PrepareOptions(inputs=(str(data),), out=str(out), tokenizer=str(tokenizers_dir["chatml"])))
    (out / "notes.txt").write_text("mine")
    _, wrote_again = prepare(PrepareOptions(inputs=(str(data),), out=str(out), tokenizer=str(tokenizers_dir["chatml"]),
                                            text_field="text", eval_fraction=0.1))
    assert wrote and wrote_again and (out / "notes.txt").exists()


def test_an_output_under_a_glob_input_is_left_out(tokenizers_dir, tmp_path):
    """A glob (or directory) input matching the output directory does not read the prepared files."""
    write_jsonl(tmp_path / "a.jsonl", [{"text": f"hello {i}"} for i in range(5)])
    options = PrepareOptions(inputs=(str(tmp_path / "*"),), out=str(tmp_path / "out"), tokenizer=str(tokenizers_dir["chatml"]),
                             format="jsonl")
    meta, _ = prepare(options)
    (tmp_path / "out" / "extra.json").write_text('{"text": "not an input"}\n')
    again, wrote = prepare(options)  # the key (inputs) unchanged: the output's files are not inputs
    assert not wrote and [i["path"] for i in again["key"]["inputs"]] == [str(tmp_path / "a.jsonl")]


def test_two_preparations_of_one_directory_wait_for_each_other(tokenizers_dir, tmp_path):
    """Another preparation holding the lock: its temporary directory is left alone and these
    wait; once it lets go, one of them prepares, the other finds that preparation."""
    data = write_jsonl(tmp_path / "t.jsonl", [{"text": f"hello {i}"} for i in range(20)])
    options = PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tokenizers_dir["chatml"]))
    results, errors = [], []

    def run():
        try:
            results.append(prepare(options)[1])
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    with preparation_lock(tmp_path / "out"):
        working = tmp_path / "out" / f"{TMP_PREFIX}other"
        working.mkdir()
        (working / "train.bin").write_bytes(b"in progress")
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        assert working.exists() and not results and not (tmp_path / "out" / "meta.json").exists()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and sorted(results) == [False, True]
    assert not working.exists()  # a leftover once its owner let go


def test_the_eos_id_from_config_json_is_in_the_key(tmp_path):
    """A tokenizer without eos_token takes the end-of-document id from the model's config.json:
    a different id there is a different preparation."""
    tok = make_tokenizer_dir(tmp_path / "tok", eos=None)
    (tmp_path / "tok" / "config.json").write_text(json.dumps({"eos_token_id": 0}))
    data = write_jsonl(tmp_path / "t.jsonl", [{"text": "hello"}])
    options = PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tok))
    assert prepare(options)[0]["eos_id"] == 0
    (tmp_path / "tok" / "config.json").write_text(json.dumps({"eos_token_id": 1}))
    meta, wrote = prepare(options)
    assert wrote and meta["eos_id"] == 1 and meta["key"]["eos_id"] == 1


def test_the_eval_split_must_hold_one_global_batch(tokenizers_dir, tmp_path):
    """training.eval reads whole global batches: a smaller eval split is refused right after
    preparing, naming data.prepare.evalFraction."""
    data = write_jsonl(tmp_path / "t.jsonl", [{"text": f"document {i} about the quick brown fox"} for i in range(40)])
    prepare_spec = SimpleNamespace(inputs=[str(data)], tokenizer=str(tokenizers_dir["chatml"]), format=None,
                                   text_field="text", messages_field=None, eval_fraction=0.2, eval_inputs=[])
    spec = SimpleNamespace(prepare=prepare_spec, path=str(tmp_path / "out"), seq_len=8)
    meta, _ = ensure_prepared(spec, eval_global_batch=2)
    tokens = meta["splits"]["eval"]["tokens"]
    assert tokens >= 2 * 8 + 1
    too_many = tokens // 8 + 1  # too_many * 8 + 1 > tokens
    with pytest.raises(PrepareError, match=rf"data.prepare.evalFraction \(--eval-fraction\): the eval split holds "
                                           rf"{tokens} tokens, fewer than one global batch .*globalBatchSize {too_many}"):
        ensure_prepared(spec, eval_global_batch=too_many)
    ensure_prepared(spec)  # no training.eval: nothing to check


def test_the_eval_fraction_limit_is_the_apis():
    from phalanx.api.pretrained import MAX_EVAL_FRACTION as API_MAX

    assert MAX_EVAL_FRACTION == API_MAX
