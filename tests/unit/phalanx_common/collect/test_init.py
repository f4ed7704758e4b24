from __future__ import annotations

import json

import pytest

from phalanx_common.collect import LINE_PARSERS, CollectorError, parser_for
from phalanx_common.contract import ENV_PROGRESS_COLLECTOR, ENV_PROGRESS_PATTERNS, Collector


def test_every_log_collector_has_a_parser():
    """Every collector but client (the script reports itself) is read by this package."""
    handled = set(LINE_PARSERS) | {Collector.REGEX, Collector.JSONL}
    assert handled == set(Collector) - {Collector.CLIENT}


def test_parser_for():
    assert parser_for({ENV_PROGRESS_COLLECTOR: "huggingface"})(" 25%|██  | 1/4 [00:00") == {"step": 1, "totalSteps": 4}
    assert parser_for({ENV_PROGRESS_COLLECTOR: "jsonl"}) is None
    regex = parser_for({ENV_PROGRESS_COLLECTOR: "regex", ENV_PROGRESS_PATTERNS: json.dumps([r"it (?P<step>\d+)"])})
    assert regex("it 7") == {"step": 7}


@pytest.mark.parametrize("env", [{}, {ENV_PROGRESS_COLLECTOR: "client"}, {ENV_PROGRESS_COLLECTOR: "tensorboard"},
                                 {ENV_PROGRESS_COLLECTOR: "regex", ENV_PROGRESS_PATTERNS: "[]"}])
def test_parser_for_refuses(env):
    with pytest.raises(CollectorError):
        parser_for(env)
