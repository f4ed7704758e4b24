from __future__ import annotations

import math

import pytest

from phalanx_common.collect.lines import (
    LineSplitter,
    count,
    key_values,
    number,
    partial,
    strip_ansi,
    tqdm_count,
)


def test_lines_end_at_newline_and_carriage_return_across_chunks():
    splitter = LineSplitter()
    assert splitter.feed(b"one\ntw") == ["one"]
    assert splitter.feed(b"o\r 50%|  | 3/6 [\r\nlast") == ["two", " 50%|  | 3/6 ["]
    assert splitter.flush() == ["last"] and splitter.flush() == []


def test_a_long_line_keeps_its_head_and_the_next_line_is_whole():
    splitter = LineSplitter(limit=8)
    assert splitter.feed(b"0123456789" * 100) == []
    assert splitter.feed(b"abc\nnext\n") == ["01234567", "next"]


def test_undecodable_bytes_are_replaced():
    assert LineSplitter().feed(b"\xff\xfe loss\n") == ["\ufffd\ufffd loss"]


@pytest.mark.parametrize(("text", "expected"), [
    ("16,384", 16384.0), ("1.08%", 1.08), (" 3.5 ", 3.5), ("1e-05", 1e-05), ("N/A", None), ("", None),
    (None, None), ("9" * 50, None),
])
def test_number(text, expected):
    assert number(text) == expected


def test_nan_is_a_number():
    assert math.isnan(number("nan"))


@pytest.mark.parametrize(("text", "expected"), [("12", 12), ("-1", None), ("1.5", None), ("9" * 16, None), (None, None)])
def test_count(text, expected):
    assert count(text) == expected


def test_tqdm_count_skips_a_nested_bar():
    assert tqdm_count(" 33%|███▎      | 2/6 [00:00<00:00, 156.10it/s]") == (2, 6)
    assert tqdm_count("100%|██████████| 1/1 [00:00<00:00, 2649.59it/s]\x1b[A") is None
    assert tqdm_count("2/6 steps") is None


def test_key_values():
    assert key_values("4.1it/s, v_num=1, train_loss=0.472, bad=x, lr=1e-3", "=") == \
        {"v_num": 1.0, "train_loss": 0.472, "lr": 0.001}
    assert key_values("429.08it/s v_num: 0.000   val_loss: 0.4", ":") == {"v_num": 0.0, "val_loss": 0.4}


def test_strip_ansi_and_partial():
    assert strip_ansi("\x1b[31mstep:  1\x1b[39m") == "step:  1"
    assert partial(step=3, loss=None, metrics={}) == {"step": 3}
    assert partial(total_steps=9, epoch=0.5, metrics={"a": 1.0}) == {"totalSteps": 9, "epoch": 0.5, "metrics": {"a": 1.0}}
