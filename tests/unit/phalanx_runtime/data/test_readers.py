"""Every input format gives the same documents: JSON Lines, Parquet, text files, datasets directories."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("numpy")

from phalanx_runtime.data.options import PrepareOptions  # noqa: E402
from phalanx_runtime.data.prepare import prepare  # noqa: E402
from tests.unit.phalanx_runtime.data.util import CONVERSATION, read_split, write_jsonl  # noqa: E402


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
