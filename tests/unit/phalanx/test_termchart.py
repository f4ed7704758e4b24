"""The terminal's curves: sparklines and line charts of a series."""

from __future__ import annotations

from phalanx.termchart import chart, sparkline


def test_sparkline_low_to_high_and_not_finite():
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "▅▅▅"  # flat: the middle
    assert sparkline([4.0, float("nan"), 1.0]) == "█×▁"
    assert sparkline(list(range(100)), width=10) == sparkline(list(range(90, 100)))


def test_chart_draws_a_falling_curve_top_left_to_bottom_right():
    rows = chart(list(range(1, 31)), [4.0 - 0.03 * s for s in range(1, 31)], title="loss", width=30, height=6)
    grid = [r.split("│", 1)[1] for r in rows[1:7]]
    assert rows[0] == "loss" and len(grid) == 6
    assert grid[0].index("•") < 3 and grid[-1].rindex("•") > 26  # high at the start, low at the end
    assert rows[1].split("│")[0].strip() == "3.97" and rows[6].split("│")[0].strip() == "3.1"
    assert "step 1" in rows[-1] and rows[-1].rstrip().endswith("30")
    assert chart([1], [2.0], title="x") == []  # one point is no curve
