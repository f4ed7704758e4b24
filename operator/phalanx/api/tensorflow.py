"""Rules of ``framework: tensorflow`` command jobs (api/types.py adds them to the spec's checks),
and which of its pods decide that it succeeded.

One TensorFlow worker per pod with TF_CONFIG rendered per pod (phalanx.frameworks.tensorflow): the
script's MultiWorkerMirroredStrategy is synchronous data parallelism over the pods, so the fields
that split the world otherwise are refused unless at their defaults, each by its field. With
``spec.roles`` the roles are TF_CONFIG task types (chief, ps, evaluator: ParameterServerStrategy).
Each rule has its CEL twin (``self`` is the spec). This module imports no API model (api/types.py
imports it): values compare as strings.
"""

from __future__ import annotations

import functools

from phalanx import constants
from phalanx.api.rules import Rule, full_replica_rules, parallelism_default, script_framework_rules

FRAMEWORK = "tensorflow"
_TF = f"!has(self.framework) || self.framework != '{FRAMEWORK}' || "


def _tf(holds):
    return lambda s: s.framework != FRAMEWORK or holds(s)


_tf_default = functools.partial(parallelism_default, _TF, lambda s: s.framework == FRAMEWORK,
                                "framework tensorflow")


_TF_MWMS = "MultiWorkerMirroredStrategy keeps a full replica of the variables in every worker"
TENSORFLOW_RULES = (
    *script_framework_rules(FRAMEWORK, "TensorFlow", "[python, train.py]", "torch"),
    Rule(_TF + "self.procsPerNode == 1",
         "framework tensorflow: spec.procsPerNode must be 1 (one TensorFlow worker per pod, one TF_CONFIG task; "
         "it uses every GPU of its pod)",
         _tf(lambda s: s.procs_per_node == 1), ".procsPerNode"),
    Rule(_TF + "!has(self.parallelism.data) || self.parallelism.data == self.nodes",
         "framework tensorflow: spec.parallelism.data must be unset or equal nodes (one data-parallel worker per pod)",
         _tf(lambda s: s.parallelism.data is None or s.parallelism.data == s.nodes), ".parallelism.data"),
    *full_replica_rules(_tf_default, _TF_MWMS),
    Rule(_TF + "!has(self.elastic)",
         "framework tensorflow: spec.elastic is not supported (TF_CONFIG lists spec.nodes workers; "
         "MultiWorkerMirroredStrategy cannot change its cluster)",
         _tf(lambda s: s.elastic is None), ".elastic"),
    Rule(_TF + f"!has(self.env) || !self.env.exists(e, e.name == '{constants.ENV_TF_CONFIG}')",
         f"framework tensorflow: spec.env must not set {constants.ENV_TF_CONFIG} (the operator renders it per pod)",
         _tf(lambda s: all(e.name != constants.ENV_TF_CONFIG for e in s.env)), ".env"),
)


# --- spec.roles under framework tensorflow: TF_CONFIG task types --------------------------------
_TF_ROLES = ("chief", "ps", "evaluator")

TENSORFLOW_ROLE_RULES = (
    Rule(f"!has(self.framework) || self.framework != 'tensorflow' || !has(self.roles) || "
         f"self.roles.all(r, r.name in {list(_TF_ROLES)})",
         "framework tensorflow: role names are TF_CONFIG task types: chief, ps, evaluator (the workers are spec.nodes)",
         lambda s: s.framework != "tensorflow" or all(r.name in _TF_ROLES for r in s.roles), ".roles"),
    Rule("!has(self.framework) || self.framework != 'tensorflow' || !has(self.roles) || "
         "self.roles.all(r, !(r.name in ['chief', 'evaluator']) || r.replicas == 1)",
         "framework tensorflow: a chief or evaluator role has replicas 1 (TensorFlow has one of each)",
         lambda s: s.framework != "tensorflow" or all(r.replicas == 1 for r in s.roles if r.name in ("chief", "evaluator")),
         ".roles"),
    Rule("!has(self.framework) || self.framework != 'tensorflow' || !has(self.roles) || "
         f"self.roles.all(r, !has(r.env) || !r.env.exists(e, e.name == '{constants.ENV_TF_CONFIG}'))",
         f"framework tensorflow: spec.roles[].env must not set {constants.ENV_TF_CONFIG} (the operator renders it per pod)",
         lambda s: s.framework != "tensorflow" or all(e.name != constants.ENV_TF_CONFIG for r in s.roles for e in r.env), ".roles"),
    Rule("!has(self.framework) || self.framework != 'tensorflow' || !has(self.roles) || "
         "!self.roles.exists(r, r.name == 'ps') || self.roles.exists(r, r.name == 'chief')",
         "framework tensorflow: a ps role needs a chief role (ParameterServerStrategy's coordinator)",
         lambda s: s.framework != "tensorflow" or not any(r.name == "ps" for r in s.roles)
         or any(r.name == "chief" for r in s.roles), ".roles"),
)


def deciding_roles(spec) -> tuple[str, ...] | None:
    """Kubeflow's TFJob: the chief decides that a tensorflow job succeeded, else the workers (an
    evaluator never decides); None for a job of another framework."""
    if spec.framework != FRAMEWORK:
        return None
    names = [r.name for r in spec.roles]
    return (constants.TF_TASK_CHIEF,) if constants.TF_TASK_CHIEF in names else (constants.ROLE_WORKER,)
