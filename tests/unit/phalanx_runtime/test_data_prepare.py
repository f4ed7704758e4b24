"""Data preparation (phalanx_runtime.data): chat answer masks under two template shapes, packing,
the eval split, idempotence, every input format, and errors naming the field and flag."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
np = pytest.importorskip("numpy")

from phalanx_runtime.data.options import PrepareError, PrepareOptions  # noqa: E402
from phalanx_runtime.data.prepare import main, prepare  # noqa: E402
from phalanx_runtime.data.writer import eval_by_hash, token_dtype  # noqa: E402
from tests.unit.phalanx_runtime.tiny_tokenizer import CHATML, LLAMA3, make_tokenizer_dir  # noqa: E402

GENERATION_TAGGED = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}"
                     "{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}{% else %}{{ m['content'] }}"
                     "<|im_end|>{% endif %}\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                     "{% endif %}")
CONVERSATION = [{"role": "system", "content": "be brief."}, {"role": "user", "content": "what is two plus two?"},
                {"role": "assistant", "content": "four."}, {"role": "user", "content": "and the fox?"},
                {"role": "assistant", "content": "it jumps over the lazy dog."}]


@pytest.fixture(scope="module")
def tokenizers_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("tokenizers")
    return {"chatml": make_tokenizer_dir(base / "chatml", chat_template=CHATML),
            "llama3": make_tokenizer_dir(base / "llama3", chat_template=LLAMA3, eos="<|eot_id|>",
                                         bos="<|begin_of_text|>"),
            "tagged": make_tokenizer_dir(base / "tagged", chat_template=GENERATION_TAGGED),
            "plain": make_tokenizer_dir(base / "plain", chat_template=None)}


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def read_split(out: Path, split: str = "train"):
    meta = json.loads((out / "meta.json").read_text())
    ids = np.fromfile(out / f"{split}.bin", dtype=meta["dtype"])
    mask_file = out / f"{split}.mask"
    mask = np.fromfile(mask_file, dtype=np.uint8).astype(bool) if mask_file.exists() else None
    return meta, ids, mask, np.fromfile(out / f"{split}.idx", dtype=np.uint64)


def decode(tok_dir: Path, ids) -> str:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tok_dir / "tokenizer.json")).decode([int(i) for i in ids], skip_special_tokens=False)


@pytest.mark.parametrize("template,answers", [
    # the answer and the end-of-turn text after it count; prompts, headers and the separator do not
    ("chatml", ["four.<|im_end|>\n", "it jumps over the lazy dog.<|im_end|>\n"]),
    ("llama3", ["four.<|eot_id|>", "it jumps over the lazy dog.<|eot_id|>"]),
    # {% generation %} blocks render their body (trim_blocks drops the newline after {% endif %})
    ("tagged", ["four.<|im_end|>", "it jumps over the lazy dog.<|im_end|>"]),
])
def test_chat_mask_counts_answer_tokens_only(template, answers, tokenizers_dir, tmp_path):
    tok = tokenizers_dir[template]
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}])
    prepare(PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tok),
                           messages_field="messages"))
    meta, ids, mask, _ = read_split(tmp_path / "out")
    assert meta["splits"]["train"]["masked"] and mask is not None and len(mask) == len(ids)
    counted_text = decode(tok, ids[mask])
    assert counted_text == "".join(answers)
    # runs of counted tokens are exactly the answers, in order
    runs = np.split(np.arange(len(ids))[mask], np.where(np.diff(np.arange(len(ids))[mask]) != 1)[0] + 1)
    assert [decode(tok, ids[r]) for r in runs] == answers
    assert int(mask.sum()) == meta["splits"]["train"]["counted"]
    # ChatML's end-of-document token is appended after the conversation and does not count; the
    # Llama-3 one's is its eos, <|eot_id|>, which already ends the last answer (nothing appended)
    assert mask[-1] == (template == "llama3")


def test_chat_without_template_is_refused(tokenizers_dir, tmp_path):
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}])
    with pytest.raises(PrepareError, match=r"data.prepare.messagesField \(--messages-field\): chat data needs a "
                                           r"chat template"):
        prepare(PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tokenizers_dir["plain"]),
                               messages_field="messages"))


def test_text_documents_packed_with_eos_no_padding(tokenizers_dir, tmp_path):
    from tokenizers import Tokenizer

    tok_dir = tokenizers_dir["chatml"]
    texts = ["hello world", "the quick brown fox", "two plus two is four."]
    data = write_jsonl(tmp_path / "t.jsonl", [{"body": t} for t in texts])
    meta, wrote = prepare(PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tok_dir),
                                         text_field="body"))
    assert wrote
    meta, ids, mask, idx = read_split(tmp_path / "out")
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    expected = [i for t in texts for i in tok.encode(t).ids + [eos]]
    assert ids.tolist() == expected and meta["dtype"] == "uint16" and meta["eos_id"] == eos
    assert mask is None and not meta["splits"]["train"]["masked"]
    assert idx.tolist()[-1] == len(ids) and len(idx) == len(texts) + 1
    assert [ids[idx[k + 1] - 1] for k in range(len(texts))] == [eos] * len(texts)
    assert meta["splits"]["train"]["tokens"] == meta["splits"]["train"]["counted"] == len(ids)
    assert "eval" not in meta["splits"] and not (tmp_path / "out" / "eval.bin").exists()


def test_token_dtype():
    assert [token_dtype(v) for v in (256, 65535, 65536, 151_936)] == ["uint16", "uint16", "uint32", "uint32"]


def test_eval_split_is_deterministic_by_document(tokenizers_dir, tmp_path):
    docs = [f"document number {i} about the quick brown fox" for i in range(400)]
    held = {d for d in docs if eval_by_hash(d, 0.25)}
    assert 60 < len(held) < 140  # about a quarter
    assert held == {d for d in reversed(docs) if eval_by_hash(d, 0.25)}  # order does not matter
    a = write_jsonl(tmp_path / "a.jsonl", [{"text": d} for d in docs])
    b = write_jsonl(tmp_path / "b.jsonl", [{"text": d} for d in reversed(docs)])
    extra = write_jsonl(tmp_path / "extra.jsonl", [{"text": "held out on purpose"}])
    tok = str(tokenizers_dir["chatml"])
    meta_a, _ = prepare(PrepareOptions(inputs=(str(a),), out=str(tmp_path / "a"), tokenizer=tok, eval_fraction=0.25))
    meta_b, _ = prepare(PrepareOptions(inputs=(str(b),), out=str(tmp_path / "b"), tokenizer=tok, eval_fraction=0.25,
                                       eval_inputs=(str(extra),)))
    assert meta_a["splits"]["eval"]["documents"] == len(held)
    assert meta_b["splits"]["eval"]["documents"] == len(held) + 1
    assert meta_a["splits"]["train"]["documents"] == meta_b["splits"]["train"]["documents"] == len(docs) - len(held)
    _, ids_a, _, _ = read_split(tmp_path / "a", "eval")
    _, ids_b, _, _ = read_split(tmp_path / "b", "eval")
    assert sorted(ids_a.tolist()) == sorted(ids_b.tolist()[:len(ids_a)])  # the same documents, reversed
    assert len(ids_b) > len(ids_a)


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


def test_formats_parquet_text_and_datasets_dir(tokenizers_dir, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = ["hello world", "the quick brown fox", "two plus two is four."]
    pq.write_table(pa.table({"text": texts}), tmp_path / "d.parquet")
    text_dir = tmp_path / "texts"
    text_dir.mkdir()
    for i, t in enumerate(texts):
        (text_dir / f"{i}.txt").write_text(t)
    hf = tmp_path / "hf"
    hf.mkdir()
    table = pa.table({"text": texts, "id": [1, 2, 3]})
    with pa.OSFile(str(hf / "data-00000-of-00001.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (hf / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    tok = str(tokenizers_dir["chatml"])
    streams = []
    for name, source in (("jsonl", write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in texts])),
                         ("parquet", tmp_path / "d.parquet"), ("text", text_dir), ("arrow", hf)):
        out = tmp_path / f"out-{name}"
        prepare(PrepareOptions(inputs=(str(source),), out=str(out), tokenizer=tok))
        streams.append(read_split(out)[1].tolist())
    assert all(s == streams[0] for s in streams)


def test_datasets_save_to_disk(tokenizers_dir, tmp_path):
    datasets = pytest.importorskip("datasets")
    records = [{"messages": CONVERSATION}, {"messages": CONVERSATION[:3]}]
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "hf"))
    meta, _ = prepare(PrepareOptions(inputs=(str(tmp_path / "hf"),), out=str(tmp_path / "out"),
                                     tokenizer=str(tokenizers_dir["chatml"]), messages_field="messages"))
    assert meta["splits"]["train"]["documents"] == 2 and meta["splits"]["train"]["masked"]


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
