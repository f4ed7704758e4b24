"""`phalanx local` with spec.roles (pure parts): when the run ends (`verdict`: the success roles'
processes all exited 0, a failure, a stop) and which processes the job's success needs
(spec.success_roles)."""

from __future__ import annotations

import pytest

from phalanx.api.slots import slots
from phalanx.local.env import (
    slot_label,
)
from phalanx.local.run import EXIT_PREEMPTED, required_processes, role_exit_codes, verdict
from tests.unit.phalanx.local.test_env import TF_ROLES, cfg

# --- when the run ends ------------------------------------------------------------------------

@pytest.mark.parametrize(("codes", "required", "kw", "want"), [
    ([None, None, None], [0, 1, 2], {}, None),
    ([0, None, None], [0, 1, 2], {}, None),              # every role: the others still run
    ([0, 0, 0], [0, 1, 2], {}, "done"),
    ([None, None, 0, None], [2], {}, "done"),            # the chief alone: the servers are stopped
    ([0, 0, None, None], [2], {}, None),                  # workers done, the chief not yet
    ([None, None, 0, 3], [2], {}, "done"),               # success wins over a failure in the same poll (as the operator)
    ([None, 1, None], [0], {}, "failed"),
    ([None, EXIT_PREEMPTED, None], [0], {}, "stopped"),  # a pod stopped by SIGTERM
    ([None, None], [0], {"stopping": True}, "stopped"),
    ([0, None], [0], {"stopping": True}, "stopped"),
    ([None, None], [0], {"timed_out": True}, "timeout"),
    ([0, None], [0], {"timed_out": True}, "done"),
    ([None, None], [], {}, None),                         # nothing required: never "done" by itself
])
def test_verdict(codes, required, kw, want):
    assert verdict(codes, required, **kw) == want


def test_required_processes_follow_the_success_roles():
    tf = cfg(framework="tensorflow", roles=TF_ROLES)
    gang = slots(tf.spec)
    assert [str(s) for s in gang] == ["node-rank 0", "node-rank 1", "chief 0", "ps 0", "ps 1", "evaluator 0"]
    assert required_processes(tf, gang) == [2]  # tensorflow with a chief: the chief
    plain = cfg(roles=[{"name": "aux", "replicas": 2}])
    assert required_processes(plain, slots(plain.spec)) == [0, 1, 2, 3]  # default: every role
    policy = cfg(roles=[{"name": "aux"}], successPolicy={"roles": ["worker"]})
    assert required_processes(policy, slots(policy.spec)) == [0, 1]
    no_roles = cfg()
    assert required_processes(no_roles, slots(no_roles.spec)) == [0, 1]


def test_role_exit_codes_and_labels():
    gang = slots(cfg(framework="tensorflow", roles=TF_ROLES).spec)
    assert role_exit_codes(gang, [-15, -15, 0, -15, -15, None]) == {
        "worker": [-15, -15], "chief": [0], "ps": [-15, -15], "evaluator": [None]}
    assert [slot_label(s) for s in gang[1:4]] == ["node 1", "chief 0", "ps 0"]


# --- each process's command and env -----------------------------------------------------------







