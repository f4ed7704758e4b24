"""phalanx_common/restarts.py: a restart count is a plain decimal or nothing; the backoff doubles, capped."""

from __future__ import annotations

import pytest

from phalanx_common.restarts import backoff_seconds, restart_count


@pytest.mark.parametrize(("value", "count"), [
    ("3", 3), ("0", 0), ("123456789", 123456789), ("1" * 10, 0), ("", 0), (" 2", 0), ("2\n", 0), ("-1", 0),
    ("²", 0), ("٣", 0), ("1e3", 0), (None, 0), (7, 0), ("9" * 5000, 0),
])
def test_restart_count(value, count):
    assert restart_count(value) == count


@pytest.mark.parametrize(("restarts", "first", "maximum", "delay"), [
    pytest.param(0, 10, 300, 0, id="first-start"),
    pytest.param(1, 10, 300, 10, id="first-restart"),
    pytest.param(3, 10, 300, 40, id="doubles"),
    pytest.param(6, 10, 300, 300, id="capped"),
    pytest.param(2, 0, 300, 0, id="no-backoff"),
    pytest.param(-4, 10, 300, 0, id="negative"),
    pytest.param(999_999_999, 10, 300, 300, id="a-huge-count-is-the-cap-not-a-huge-power"),
    pytest.param(2, 10, 0, 0, id="zero-cap"),
])
def test_backoff_seconds(restarts, first, maximum, delay):
    assert backoff_seconds(restarts, first, maximum) == delay
