"""Rules of ``framework: horovod`` command jobs (api/types.py adds them to the spec's checks).

Horovod is synchronous data parallelism, one process per GPU: the job runs the user's own Horovod
script (``spec.command``, usually under ``python -m phalanx_runtime.horovod_launch``), every pod is
a Horovod host with ``procsPerNode`` slots, and every process is one data-parallel rank. What
Horovod cannot honour is refused, each by its field: the fields that split the world otherwise
(unless at their defaults), elastic (Horovod elastic needs horovodrun's driver), spec.roles (every
pod is a worker), hostNetwork (the rendezvous server's port is fixed), and spec.env setting a
``HOROVOD_*`` variable the operator renders. Each rule has its CEL twin (``self`` is the spec).
This module imports no API model (api/types.py imports it): values compare as strings.
"""

from __future__ import annotations

from typing import Any

from phalanx import constants
from phalanx.api.rules import Rule, full_replica_rules, parallelism_default, script_framework_rules

FRAMEWORK = "horovod"
_HVD = f"!has(self.framework) || self.framework != '{FRAMEWORK}' || "
_WHY = "Horovod is data parallel: every process is one rank holding a full replica"


def _hvd(holds):
    return lambda s: s.framework != FRAMEWORK or holds(s)


def _default(field: str, attr: str, default: Any, cel_default: str, why: str = _WHY) -> Rule:
    return parallelism_default(_HVD, lambda s: s.framework == FRAMEWORK, "framework horovod",
                               field, attr, default, cel_default, why)


_PER_PROCESS = (constants.ENV_HOROVOD_RANK, constants.ENV_HOROVOD_LOCAL_RANK)


def _env(name: str) -> Rule:
    who = "the operator or, per process, the launcher sets it" if name in _PER_PROCESS else "the operator renders it per pod"
    return Rule(_HVD + f"!has(self.env) || !self.env.exists(e, e.name == '{name}')",
                f"framework horovod: spec.env must not set {name} ({who})",
                _hvd(lambda s: all(e.name != name for e in s.env)), ".env")

HOROVOD_RULES = (
    *script_framework_rules(FRAMEWORK, "Horovod", "[python, -m, phalanx_runtime.horovod_launch, --, python, train.py]",
                            "not Horovod"),
    Rule(_HVD + "!has(self.parallelism.data) || self.parallelism.data == self.nodes * self.procsPerNode",
         "framework horovod: spec.parallelism.data must be unset or equal nodes × procsPerNode "
         "(every Horovod process is one data-parallel rank)",
         _hvd(lambda s: s.parallelism.data is None or s.parallelism.data == s.world_size), ".parallelism.data"),
    *full_replica_rules(_default, _WHY),
    Rule(_HVD + "!has(self.elastic)",
         "framework horovod: spec.elastic is not supported (Horovod elastic needs horovodrun's driver; "
         "the rendezvous server's plan is spec.nodes pods)",
         _hvd(lambda s: s.elastic is None), ".elastic"),
    Rule(_HVD + "!has(self.roles) || size(self.roles) == 0",
         "framework horovod: every pod is a Horovod worker; spec.roles is not supported",
         _hvd(lambda s: not s.roles), ".roles"),
    Rule(_HVD + "self.network.hostNetwork == false",
         f"framework horovod: spec.network.hostNetwork is not supported (pod 0's Horovod rendezvous server "
         f"listens on the fixed port {constants.HOROVOD_RENDEZVOUS_PORT}, which the host's other jobs could hold)",
         _hvd(lambda s: not s.network.host_network), ".network.hostNetwork"),
    *(_env(name) for name in constants.HOROVOD_RENDERED_ENV),
)
