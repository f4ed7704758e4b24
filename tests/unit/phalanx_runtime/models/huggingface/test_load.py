"""The import's readability check: a safetensors file the pods cannot open is named, with the field,
before DCP reads (safetensors reports such a file as missing)."""

from __future__ import annotations

import pytest

from phalanx_runtime.models.huggingface.load import check_readable


def test_a_readable_directory_passes(tmp_path):
    (tmp_path / "model-00001-of-00001.safetensors").write_bytes(b"x")
    check_readable(str(tmp_path))


def test_a_file_that_cannot_be_opened_is_named(tmp_path):
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x")
    (tmp_path / "model-00002-of-00002.safetensors").mkdir()  # opening it fails as an unreadable file does
    with pytest.raises(ValueError, match=r"model\.pretrained\.path: .*model-00002-of-00002\.safetensors cannot be read"):
        check_readable(str(tmp_path))
