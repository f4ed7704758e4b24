"""The operator↔runtime contract (phalanx_common/contract.py): every name re-exported by
phalanx.constants, the stop grace read from the env, and how a stop escalates."""

from __future__ import annotations

import pytest

from phalanx import constants
from phalanx.render.pod import TERMINATION_GRACE_SECONDS
from phalanx_common import contract

PUBLIC = sorted(name for name in vars(contract) if name[0].isupper())


def test_phalanx_constants_reexports_every_name():
    missing = [name for name in PUBLIC if getattr(constants, name, None) is not getattr(contract, name)]
    assert not missing, missing


@pytest.mark.parametrize("env, default, grace", [
    ({}, contract.STOP_GRACE_SECONDS, 90.0),
    ({contract.ENV_STOP_GRACE_SECONDS: "12.5"}, contract.STOP_GRACE_SECONDS, 12.5),
    ({contract.ENV_STOP_GRACE_SECONDS: ""}, 30, 30.0),  # set but empty: the default
    ({"OTHER": "1"}, 30, 30.0),
])
def test_stop_grace(env, default, grace):
    value = contract.stop_grace(env, default=default)
    assert value == grace and isinstance(value, float)


def test_stop_grace_reads_the_process_env(monkeypatch):
    monkeypatch.setenv(contract.ENV_STOP_GRACE_SECONDS, "7")
    assert contract.stop_grace() == 7.0


@pytest.mark.parametrize("level, seconds", [(0, 90), (1, 95), (2, 100), (3, 105)])
def test_each_layer_gives_up_one_escalation_step_after_the_one_below(level, seconds):
    assert contract.escalation(level, contract.STOP_GRACE_SECONDS) == seconds


def test_the_last_layer_gives_up_inside_the_pods_grace_period():
    assert contract.escalation(3, contract.STOP_GRACE_SECONDS) < TERMINATION_GRACE_SECONDS
