import pytest

from phalanx.lifecycle.pacing import (
    WAKE_COALESCE_MAX_SECONDS,
    WAKE_COALESCE_MIN_SECONDS,
    wake_coalesce_seconds,
)


@pytest.mark.parametrize("pods", [0, 1, 8, 51])
def test_small_gangs_coalesce_briefly(pods):
    assert wake_coalesce_seconds(pods) == WAKE_COALESCE_MIN_SECONDS


@pytest.mark.parametrize("pods, seconds", [(64, 0.25), (128, 0.5), (256, 1.0), (384, 1.5)])
def test_the_wait_grows_with_the_gang(pods, seconds):
    assert wake_coalesce_seconds(pods) == pytest.approx(seconds)


@pytest.mark.parametrize("pods", [512, 4096, 16384])
def test_big_gangs_wait_at_most_the_cap(pods):
    assert wake_coalesce_seconds(pods) == WAKE_COALESCE_MAX_SECONDS


def test_monotonic():
    waits = [wake_coalesce_seconds(n) for n in range(0, 2048, 7)]
    assert waits == sorted(waits)
