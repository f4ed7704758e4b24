"""frameworks.base: the plugin interface. Its validate names each broken rule by its field under
``spec`` and says who enforces it (the API server through the rule's CEL twin, or only the
operator); the base class renders nothing (test_none.py: the framework that adds nothing)."""

from __future__ import annotations

import pytest

from phalanx.api.rules import Rule
from phalanx.api.types import Framework, TrainingJobSpec
from phalanx.frameworks.base import FrameworkPlugin
from phalanx.problems import Problem


class Strict(FrameworkPlugin):
    framework = Framework.NONE
    rules = (
        Rule("self.nodes <= 2", "at most 2 nodes", lambda s: s.nodes <= 2, ".nodes"),
        Rule(None, "no args (the operator's rule only)", lambda s: not s.args, ".args"),
        Rule("has(self.command)", "a command", lambda s: s.command is not None),  # no field: the spec itself
        Rule("self.procsPerNode > 0", "procs per node divide 8", lambda s: 8 % (s.procs_per_node - 1) == 0, ".procsPerNode"),
    )


def spec(**over) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate({"image": "x", "command": ["train"], "nodes": 2, "procsPerNode": 3} | over)


@pytest.mark.parametrize("over,problems", [
    ({}, []),
    ({"nodes": 3}, [Problem("spec.nodes", "at most 2 nodes", "api")]),
    ({"args": ["--fast"]}, [Problem("spec.args", "no args (the operator's rule only)", "operator")]),
    ({"command": None, "model": {"preset": "debug"}}, [Problem("spec", "a command", "api")]),
    # a predicate that raises (8 % 0) met a value its CEL twin would refuse: broken
    ({"procsPerNode": 1}, [Problem("spec.procsPerNode", "procs per node divide 8", "api")]),
    ({"nodes": 3, "args": ["x"]}, [Problem("spec.nodes", "at most 2 nodes", "api"),
                                   Problem("spec.args", "no args (the operator's rule only)", "operator")]),
])
def test_validate_names_every_broken_rule_in_order(over, problems):
    assert Strict().validate(spec(**over)) == problems


def test_the_base_plugin_adds_nothing_and_observes_the_specs_roles():
    plugin, job_spec = Strict(), spec(roles=[{"name": "ps"}], successPolicy={"roles": ["ps"]})
    assert plugin.job_env(job_spec) == [] and plugin.config_files(job_spec) == {}
    assert plugin.success_roles(job_spec) == ("ps",)
