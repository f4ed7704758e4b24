"""Input files → documents, one reader per format, each streaming (bounded memory).

A document is a string (``text_field``, or a whole text file) or, for chat data, a list of
``{role, content}`` messages (``messages_field``). Formats, by name when not given:

- ``jsonl``: ``*.jsonl``, ``*.ndjson``, ``*.json`` — one JSON object per line;
- ``parquet``: ``*.parquet`` — read in record batches, only the needed column;
- ``text``: ``*.txt``, ``*.text``, ``*.md`` — one document per file (a file is read whole);
- ``arrow``: a Hugging Face ``datasets`` directory written by ``save_to_disk`` (its ``state.json``
  lists the ``*.arrow`` files, read with pyarrow), or a single ``*.arrow`` file.

An input may be a glob pattern, or a directory that is not a ``datasets`` directory: its files,
recursively, in sorted order.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from pathlib import Path

from phalanx_runtime.data.options import field_error

Document = str | list  # text, or chat messages
EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".txt": "text",
              ".text": "text", ".md": "text", ".arrow": "arrow"}
BATCH_ROWS = 1024


def is_hf_dataset_dir(path: Path) -> bool:
    return path.is_dir() and (path / "state.json").is_file()


def format_of(path: Path, fmt: str | None, attr: str) -> str:
    if fmt is not None:
        return fmt
    if is_hf_dataset_dir(path):
        return "arrow"
    if path.is_dir() and (path / "dataset_dict.json").is_file():
        raise field_error(attr, f"{path} is a datasets DatasetDict: name one split's directory (e.g. {path}/train)")
    found = EXTENSIONS.get(path.suffix.lower())
    if found is None:
        raise field_error(attr, f"{path}: format unknown from its name (one of {', '.join(sorted(EXTENSIONS))}); "
                                "set data.prepare.format (--format)")
    return found


def resolve_inputs(patterns: tuple[str, ...], fmt: str | None, attr: str,
                   exclude: Path | None = None) -> list[tuple[Path, str]]:
    """Every input file (or datasets directory) with its format, in a deterministic order;
    nothing inside ``exclude`` (the output directory, which a glob or directory may hold)."""
    excluded = exclude.resolve() if exclude is not None else None

    def kept(path: Path) -> bool:
        return excluded is None or not path.resolve().is_relative_to(excluded)

    out: list[tuple[Path, str]] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches or not all(os.path.exists(m) for m in matches):
            raise field_error(attr, f"{pattern}: no such file or directory")
        for match in filter(kept, map(Path, matches)):
            if match.is_dir() and not is_hf_dataset_dir(match) and not (match / "dataset_dict.json").is_file():
                files = sorted(p for p in match.rglob("*") if p.is_file() and not p.name.startswith(".") and kept(p))
                if not files:
                    raise field_error(attr, f"{match}: an empty directory")
                out += [(f, format_of(f, fmt, attr)) for f in files]
            else:
                fmt_found = format_of(match, fmt, attr)
                if fmt_found == "arrow":
                    arrow_files(match, attr)  # its state.json checked now, naming the field
                out.append((match, fmt_found))
    return out


def input_files(path: Path) -> list[Path]:
    """The files whose sizes and times identify an input (a datasets directory: all of them)."""
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def _value(record, where: str, text_field: str, messages_field: str | None) -> Document:
    if not isinstance(record, dict):
        raise field_error("text_field", f"{where}: a {type(record).__name__}, not an object with fields")
    if messages_field is not None:
        messages = record.get(messages_field)
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise field_error("messages_field", f"{where}: field {messages_field!r} is not a list of "
                                                "{role, content} objects")
        return messages
    text = record.get(text_field)
    if not isinstance(text, str):
        what = "no field" if text_field not in record else f"a {type(text).__name__} in field"
        raise field_error("text_field", f"{where}: {what} {text_field!r} (a string expected)")
    return text


def _jsonl(path: Path, text_field: str, messages_field: str | None) -> Iterator[Document]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise field_error("format", f"{path} line {lineno}: not JSON ({exc.msg})") from None
            yield _value(record, f"{path} line {lineno}", text_field, messages_field)


def _column(path: Path, names: list[str], text_field: str, messages_field: str | None) -> str:
    column = messages_field or text_field
    if column not in names:
        attr = "messages_field" if messages_field else "text_field"
        raise field_error(attr, f"{path} has no column {column!r} (columns: {', '.join(names)})")
    return column


def _batches(batches, path: Path, column: str, text_field: str, messages_field: str | None) -> Iterator[Document]:
    row = 0
    for batch in batches:
        for value in batch.column(batch.schema.get_field_index(column)).to_pylist():
            yield _value({column: value}, f"{path} row {row}", text_field, messages_field)
            row += 1


def _parquet(path: Path, text_field: str, messages_field: str | None) -> Iterator[Document]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    column = _column(path, pf.schema_arrow.names, text_field, messages_field)
    yield from _batches(pf.iter_batches(batch_size=BATCH_ROWS, columns=[column]), path, column, text_field,
                        messages_field)


def arrow_files(path: Path, attr: str = "inputs") -> list[Path]:
    """A datasets directory's ``*.arrow`` files (its state.json), each inside the directory."""
    if not path.is_dir():
        return [path]
    root = path.resolve()
    try:
        listed = [f["filename"] for f in json.loads((path / "state.json").read_text()).get("_data_files", [])]
        files = [path / name for name in listed]
    except (ValueError, TypeError, KeyError, AttributeError):
        raise field_error(attr, f"{path / 'state.json'}: not a datasets state.json (_data_files with filenames)") from None
    outside = [name for name, file in zip(listed, files, strict=True) if not file.resolve().is_relative_to(root)]
    if outside:
        raise field_error(attr, f"{path / 'state.json'} names a file outside {path}: {outside[0]!r}")
    return files


def _arrow(path: Path, text_field: str, messages_field: str | None) -> Iterator[Document]:
    import pyarrow as pa

    for file in arrow_files(path):
        # Memory-mapped: read_all() references the file's pages, it copies nothing.
        with pa.memory_map(str(file)) as source:
            try:
                table = pa.ipc.open_stream(source).read_all()  # what datasets writes
            except pa.ArrowInvalid:
                source.seek(0)
                table = pa.ipc.open_file(source).read_all()
            column = _column(file, table.schema.names, text_field, messages_field)
            yield from _batches(table.select([column]).to_batches(max_chunksize=BATCH_ROWS), file, column,
                                text_field, messages_field)


def _text(path: Path, text_field: str, messages_field: str | None) -> Iterator[Document]:
    if messages_field is not None:
        raise field_error("messages_field", f"{path}: a text file holds no fields (chat data needs jsonl, parquet "
                                            "or arrow)")
    try:
        yield path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise field_error("format", f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


READERS = {"jsonl": _jsonl, "parquet": _parquet, "arrow": _arrow, "text": _text}


def read_documents(path: Path, fmt: str, text_field: str, messages_field: str | None) -> Iterator[Document]:
    return READERS[fmt](path, text_field, messages_field)
