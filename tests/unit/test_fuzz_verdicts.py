"""Fuzzing the one verdict: hostile TrainingJobs and TrainingSweeps, mostly valid with
one or two hostile mutations so that they get past the schema and reach the operator's own rules:
every volume and env source kind with contents drawn from the Kubernetes schema, every field the
cluster policy looks at, lists and strings at and just over their limits, odd unicode, what YAML
reads and JSON cannot carry, values nested up to the API server's JSON depth limit (10,000) in
typed places, unknown fields, metadata and where a sweep takes any scalar.

Properties: ``validate_job`` and ``check_sweep`` never raise and always give a verdict whose
problems each name a field; `phalanx validate FILE` (YAML and JSON) exits 0 or 1 with that same
verdict, never a traceback; ``safejson.loads`` decodes the JSON of any of them to a bounded depth;
and whatever the verdict accepts renders to pods within the default policy.

Fixed seed, bounded budget (``derandomize``, no example database): the same examples every run.
tests/integration/test_fuzz_operator.py sends the same kinds of objects to a real API server and
operator.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import io
import json
import math
import traceback
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from phalanx import safejson
from phalanx.api.config import OperatorConfig
from phalanx.api.kubeschemas import member_schema
from phalanx.api.kubetypes import VOLUME_SOURCES, device_grant_env
from phalanx.api.slots import slots
from phalanx.cli import main
from phalanx.render import render_children
from phalanx.sweep.check import check_sweep, trial_object
from phalanx.validate import validate_job

# No shrinking: a failure is reported as found (shrinking a 10,000-level example or a 256-item
# list can take minutes, past the unit tier's budget).
FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                phases=(Phase.explicit, Phase.generate),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much, HealthCheck.large_base_example])
CONFIG = OperatorConfig()  # the default policy: a cluster shared by tenants who do not trust each other

# --- What the default policy must never let through (written out here, not read from
# phalanx.api.policy: a loosened default must fail these tests, not move them) ---------------------
SAFE_VOLUME_KINDS = {"persistentVolumeClaim", "configMap", "emptyDir", "ephemeral", "downwardAPI", "projected"}
SAFE_PROJECTED_KINDS = {"configMap", "downwardAPI", "clusterTrustBundle"}
FORBIDDEN_TOLERATIONS = {"node.kubernetes.io/unschedulable", "node-role.kubernetes.io/control-plane",
                         "node-role.kubernetes.io/master"}
FORBIDDEN_SELECTORS = {"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}
SECRET_REF_FIELDS = {"secretName", "secretRef", "nodePublishSecretRef", "secretKeyRef"}
DEFAULT_MAX_PODS = 1024
OPERATOR_GPU_ENV = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}  # render/pod.py, pods without GPUs

# --- Building blocks ------------------------------------------------------------------------------

# Legal in JSON and YAML strings, trouble for naive code: NUL, a lone combining mark, bidi
# overrides, a zero-width joiner, emoji outside the BMP (a surrogate pair in JSON's \u escapes),
# a BOM, line separators, DEL and C1 controls (raw in JSON, not in YAML), YAML indicators.
ODD = ("\x00", "\u0301", "\u202e", "\u200f", "\u200d", "\U0001f600", "\U0001f469\u200d\U0001f4bb", "\ufeff",
       "\u2028", "\u0085", "\x7f", "\x9b", "\u00a0", "\u0130", "\U0010fffd", "\t", "\n", '"', "'", "\\",
       ": ", "#", "{", "&", "*", "!", "|", "%", "@", "`")
PLAIN = ("a", "data", "x-1", "team", "cfg", "ckpt", "/data", "metadata.name", "1Gi", "limits.cpu", "key")
odd_text = st.lists(st.sampled_from(ODD + tuple("az09-_./")), max_size=10).map("".join)
text = st.one_of(st.sampled_from(PLAIN), odd_text)
LONG_UNITS = ("x", "\U0001f600", "e\u0301", "\u202e", "\x00")


def near(limit: int) -> st.SearchStrategy[str]:
    """A string of limit-1, limit or limit+1 characters (code points, as the API server counts)."""
    return st.builds(lambda unit, n: (unit * n)[:n], st.sampled_from(LONG_UNITS),
                     st.sampled_from((limit - 1, limit, limit + 1)))


@dataclass(frozen=True)
class Deep:
    """A value nested ``levels`` containers deep, built only when the example runs (hypothesis
    keeps and prints the short form; ``repr`` of the real thing would recurse)."""

    levels: int
    shape: str  # "map": {"a": {"a": ...}}, "list": [[...]]

    def value(self) -> Any:
        node: Any = {} if self.shape == "map" else []
        for _ in range(self.levels - 1):
            node = {"a": node} if self.shape == "map" else [node]
        return node

    def text(self) -> str:
        opener, closer, leaf = ('{"a":', "}", "{}") if self.shape == "map" else ("[", "]", "[]")
        return opener * (self.levels - 1) + leaf + closer * (self.levels - 1)


# Around MAX_SPEC_DEPTH and safejson.MAX_DEPTH, PyYAML's and json.loads' recursion, and the API
# server's limit of 10,000 (the whole body: 9,990 here is within it, 10,000 past it).
DEPTHS = (33, 65, 300, 500, 999, 1000, 3000, 9_990, 10_000)
deep = st.builds(Deep, st.sampled_from(DEPTHS), st.sampled_from(("map", "list")))

QUANTITIES = ("1", "500m", "64Gi", "1e3", "0", "-1", "1.5Ki", "Infinity", "1\u0301", "")
integer = st.one_of(st.integers(0, 511), st.sampled_from((-1, 2**31 - 1, 2**31, 2**63)))


def kube_value(schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """A value of a core/v1 schema (kube_schemas.json): the right types, random contents; deeper
    than 3 levels only the required fields."""
    if schema.get("x-kubernetes-int-or-string"):
        return st.one_of(st.sampled_from(QUANTITIES), st.integers(0, 1 << 20))
    kind = schema["type"]
    if kind == "object":
        props = schema.get("properties")
        if props is None:  # a map
            return st.dictionaries(st.sampled_from(PLAIN), kube_value(schema["additionalProperties"], depth + 1),
                                   max_size=0 if depth > 3 else 2)
        required = {k: kube_value(props[k], depth + 1) for k in schema.get("required", ())}
        optional = {} if depth > 3 else {k: kube_value(v, depth + 1) for k, v in props.items() if k not in required}
        return st.fixed_dictionaries(required, optional=optional)
    if kind == "array":
        return st.lists(kube_value(schema["items"], depth + 1), max_size=0 if depth > 3 else 2)
    if kind == "string":
        return st.sampled_from(schema["enum"]) if "enum" in schema else text
    if kind == "integer":
        return integer
    if kind == "boolean":
        return st.booleans()
    return st.floats(0, 100)


@cache
def volume_source(kind: str) -> st.SearchStrategy[Any]:
    if kind == "projected":
        return projected
    return kube_value(member_schema("volumeSources", kind))


@cache
def env_source(kind: str) -> st.SearchStrategy[Any]:
    return kube_value(member_schema("envVarSources", kind))


PROJECTED_KINDS = ("clusterTrustBundle", "configMap", "downwardAPI", "podCertificate", "secret", "serviceAccountToken")
_PROJECTION = member_schema("volumeSources", "projected")["properties"]["sources"]["items"]["properties"]
projection = st.sampled_from(PROJECTED_KINDS).flatmap(lambda k: kube_value(_PROJECTION[k], 2).map(lambda v: {k: v}))
projected = st.fixed_dictionaries(
    {"sources": st.lists(st.one_of(projection, st.tuples(projection, projection).map(lambda p: {**p[0], **p[1]})),
                         min_size=1, max_size=3)},
    optional={"defaultMode": integer})


def volume(name: str, kind: str) -> st.SearchStrategy[dict[str, Any]]:
    return volume_source(kind).map(lambda v: {"name": name, kind: v})


volumes = st.one_of(
    st.lists(st.sampled_from(VOLUME_SOURCES), min_size=1, max_size=3).flatmap(
        lambda kinds: st.tuples(*(volume(f"v{i}", k) for i, k in enumerate(kinds)))).map(list),
    # many: near maxItems 64
    st.sampled_from((63, 64, 65)).map(lambda n: [{"name": f"v{i}", "emptyDir": {}} for i in range(n)]),
    # two sources in one volume: a safe one beside one that is not
    st.tuples(st.sampled_from(sorted(SAFE_VOLUME_KINDS)), st.sampled_from(VOLUME_SOURCES)).filter(lambda k: k[0] != k[1]).flatmap(
        lambda k: st.tuples(volume_source(k[0]), volume_source(k[1])).map(lambda v: [{"name": "two", k[0]: v[0], k[1]: v[1]}])),
)
mount_paths = st.sampled_from(("/data", "/etc/phalanx", "/dev/shm", "/dev/shm/x", "/phalanx/x", "relative",
                               "/d\u202e", "/" + "x" * 1024, "/checkpoints"))

ENV_NAMES = ("HF_HOME", "DATA_DIR", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_CONFIG_DEVICES",
             "AMD_VISIBLE_DEVICES", "HABANA_VISIBLE_MODULES", "MASTER_ADDR", "WORLD_SIZE", "PHALANX_CONFIG",
             "TF_CONFIG", "LD_PRELOAD", "nvidia_visible_devices", "É", "A\u0301", "1BAD", "", "E" * 256, "E" * 257)
ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")


def env_var(name: str) -> st.SearchStrategy[dict[str, Any]]:
    value_from = st.sampled_from(ENV_SOURCES).flatmap(lambda k: env_source(k).map(lambda v: {k: v}))
    return st.one_of(
        st.one_of(text, near(32768)).map(lambda v: {"name": name, "value": v}),
        value_from.map(lambda v: {"name": name, "valueFrom": v}),
        st.tuples(text, value_from).map(lambda p: {"name": name, "value": p[0], "valueFrom": p[1]}),  # both: refused
    )


env_list = st.one_of(
    st.lists(st.sampled_from(ENV_NAMES), min_size=1, max_size=4, unique=True).flatmap(
        lambda names: st.tuples(*(env_var(n) for n in names))).map(list),
    st.sampled_from((255, 256, 257)).map(lambda n: [{"name": f"E{i}", "value": "v"} for i in range(n)]),
)

TOLERATION_KEYS = ("", "gpu", "example.com/dedicated", "node.kubernetes.io/unschedulable",
                   "node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master",
                   "node.kubernetes.io/not-ready", "node.kubernetes.io/memory-pressure",
                   "NODE.kubernetes.io/unschedulable", "node.kubernetes.io/unschedulable\u200d")
toleration = st.fixed_dictionaries({}, optional={
    "key": st.sampled_from(TOLERATION_KEYS), "operator": st.sampled_from(("Exists", "Equal", "In")),
    "value": st.one_of(st.sampled_from(("", "true", "x")), odd_text),
    "effect": st.sampled_from(("NoSchedule", "PreferNoSchedule", "NoExecute", "")),
    "tolerationSeconds": integer})
tolerations = st.one_of(
    st.lists(toleration, min_size=1, max_size=3),
    st.sampled_from((64, 65)).map(lambda n: [{"key": f"k{i}", "operator": "Exists"} for i in range(n)]))

SELECTOR_KEYS = ("zone", "topology.kubernetes.io/zone", "node-role.kubernetes.io/control-plane",
                 "node-role.kubernetes.io/master", "kubernetes.io/hostname", "gpu\u0301", "x" * 64)
node_selector = st.one_of(
    st.dictionaries(st.sampled_from(SELECTOR_KEYS), st.one_of(st.sampled_from(("", "a", "true")), odd_text, near(63)),
                    min_size=1, max_size=3),
    st.sampled_from((64, 65)).map(lambda n: {f"k{i}": "v" for i in range(n)}))

BACKENDS = ("native", "kueue", "workload", "volcano", "coscheduling", "Volcano", "")
SCHEDULERS = ("default-scheduler", "volcano", "scheduler-plugins-scheduler", "my-scheduler", "Volcano")
PRIORITY_CLASSES = ("high", "system-node-critical", "system-cluster-critical", "system-x", "System-node-critical",
                    "systemd-high", "system")
scheduling = st.fixed_dictionaries({}, optional={
    "backend": st.sampled_from(BACKENDS), "schedulerName": st.sampled_from(SCHEDULERS),
    "priorityClassName": st.sampled_from(PRIORITY_CLASSES),
    "queue": st.one_of(st.sampled_from(("team-a", "default", "Queue")), near(253)),
    "gangTimeoutSeconds": st.sampled_from((0, 600, 2**31, 2**31 + 1)),
    "onGangTimeout": st.sampled_from(("Fail", "Wait", "fail")),
    "topology": st.fixed_dictionaries({}, optional={"required": st.sampled_from(("rack", "topology.kubernetes.io/zone")),
                                                    "preferred": st.sampled_from(("block", "x" * 317))})})

network = st.fixed_dictionaries({}, optional={
    "profile": st.sampled_from(("default", "ib", "Default", "")),
    "ncclEnv": st.dictionaries(st.sampled_from(("NCCL_DEBUG",) + ENV_NAMES[2:8]), st.one_of(text, near(4096)), max_size=2),
    "hostNetwork": st.booleans()})

failure_policy = st.fixed_dictionaries({}, optional={
    "maxRestarts": st.sampled_from((0, 3, 10_000, 10_001)),
    "backoffSeconds": st.sampled_from((0, 1, 86_400, 86_401)),
    "maxBackoffSeconds": st.sampled_from((0, 300, 86_401)),
    "hangTimeoutSeconds": st.sampled_from((0, 60)),
    "retryableExitCodes": st.sampled_from((1, 256, 257)).map(lambda n: [i % 256 for i in range(n)]),
    "permanentExitCodes": st.lists(st.integers(-1, 256), max_size=3)})

SERVICE_ACCOUNTS = ("default", "builder", "system:serviceaccount:kube-system:default", "a" * 253, "a" * 254, "Default")


def role(name: str, env: bool) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"name": st.just(name), "replicas": st.sampled_from((1, 2, 1024, 1025))},
                                 optional={"env": env_list} if env else {})


roles = st.one_of(
    st.lists(st.sampled_from(("ps", "chief", "evaluator", "worker", "node", "Ps", "p" * 11)), min_size=1, max_size=3,
             unique=True).flatmap(lambda names: st.tuples(*(role(n, True) for n in names))).map(list),
    st.sampled_from((8, 9)).map(lambda n: [{"name": f"r{i}", "replicas": 1} for i in range(n)]))

# --- Mutations: each a list of edits (path from the object's root, value; None deletes) -----------

Edit = tuple[tuple[str, ...], Any]
COMMAND = ["torchrun", "train.py"]


def _at(*path: str):
    return lambda value: [(path, value)]


def _counts(nodes: int, procs: int, elastic: tuple[int, int] | None) -> list[Edit]:
    edits: list[Edit] = [(("spec", "nodes"), nodes), (("spec", "procsPerNode"), procs),
                         (("spec", "training", "globalBatchSize"), max(nodes * procs, 1))]  # the runtime's layout holds
    if elastic:
        edits.append((("spec", "elastic"), {"minNodes": elastic[0], "maxNodes": elastic[1]}))
    return edits


def _roles(value: list[dict[str, Any]]) -> list[Edit]:
    """Roles run a command job's pods: the job becomes one (else every role is refused for it)."""
    return [(("spec", "roles"), value), (("spec", "model"), None), (("spec", "command"), COMMAND)]


def _checkpoint(kind_and_value: tuple[str, Any], mount: str) -> list[Edit]:
    kind, value = kind_and_value
    return [(("spec", "checkpoint"), {"volume": {kind: value}, "mountPath": mount, "intervalSteps": 10})]


def _volumes(value: list[dict[str, Any]], mount: str) -> list[Edit]:
    return [(("spec", "volumes"), value), (("spec", "volumeMounts"), [{"name": value[0]["name"], "mountPath": mount}])]


def job_mutations(max_nodes: int) -> st.SearchStrategy[list[Edit]]:
    """Spec and metadata mutations of a job (``max_nodes``: the largest gang an accepted job may
    ask for; the integration test keeps it small, the unit test goes to the policy's limit)."""
    big = tuple(n for n in (1023, 1024, 1025, 16_384, 16_385) if n <= max_nodes or n > DEFAULT_MAX_PODS)
    nodes = st.sampled_from((0, 1, 2, 3) + big)
    elastic = st.one_of(st.none(), st.tuples(st.sampled_from((1, 2, 3)), st.sampled_from((1, 2, 4) + big)))
    checkpoint_kind = st.sampled_from(VOLUME_SOURCES).flatmap(lambda k: volume_source(k).map(lambda v: (k, v)))
    return st.one_of(
        st.builds(_volumes, volumes, mount_paths),
        st.builds(_checkpoint, checkpoint_kind, mount_paths),
        env_list.map(_at("spec", "env")),
        roles.map(_roles),
        scheduling.map(_at("spec", "scheduling")),
        tolerations.map(_at("spec", "tolerations")),
        node_selector.map(_at("spec", "nodeSelector")),
        st.sampled_from(SERVICE_ACCOUNTS).map(_at("spec", "serviceAccountName")),
        network.map(_at("spec", "network")),
        st.builds(_counts, nodes, st.sampled_from((1, 4, 8, 64, 65)), elastic),
        failure_policy.map(_at("spec", "failurePolicy")),
        # numbers JSON writes with an exponent and no '.' (1e-05), at and past their bounds
        st.fixed_dictionaries({}, optional={
            "lr": st.sampled_from((1e-05, 3e-4, 2.5e-05, 10.0, 1e300)),
            "steps": st.sampled_from((1, 2**40, 2**40 + 1)), "seed": st.sampled_from((0, 2**53 - 1, 2**53)),
            "globalBatchSize": st.sampled_from((8, 2**24 + 1))}).map(_at("spec", "training")),
        st.fixed_dictionaries({}, optional={
            "gpus": st.sampled_from((0, 1, 64, 65)), "cpu": st.sampled_from(QUANTITIES),
            "memory": st.sampled_from(("1Gi", "64GB", "1e400")),
            "extra": st.dictionaries(st.sampled_from(("nvidia.com/gpu", "rdma/hca", "hugepages-2Mi", "example.com/\U0001f600")),
                                     st.sampled_from((1, "1Gi", "0.5")), max_size=2)}).map(_at("spec", "resources")),
        # strings at their limits, odd unicode in free text
        st.one_of(near(512), odd_text.map(lambda t: "img" + t)).map(_at("spec", "image")),
        st.one_of(st.lists(st.one_of(text, near(4096)), max_size=3),
                  st.sampled_from((256, 257)).map(lambda n: ["a"] * n)).map(_at("spec", "args")),
        st.sampled_from(("job", "a" * 45, "a" * 46, "j\u0301ob", "Job", "-job", "job-", "jo\u202eb", "")).map(_at("metadata", "name")),
        st.dictionaries(st.sampled_from(("app", "example.com/team", "x" * 64, "\U0001f600")), st.one_of(text, near(63)),
                        max_size=2).map(_at("metadata", "labels")),
        st.dictionaries(st.sampled_from(("note", "example.com/x")), st.one_of(text, near(1 << 16)),
                        max_size=2).map(_at("metadata", "annotations")),
        # wrong types, unknown and snake_case fields
        st.sampled_from([
            [(("spec", "nodes"), "4")], [(("spec", "nodes"), 2.0)], [(("spec", "nodes"), 2.5)],
            [(("spec", "nodes"), True)], [(("spec", "suspend"), "false")], [(("spec", "procs_per_node"), 4)],
            [(("spec", "unknownField"), {"x": 1})], [(("spec", "env"), {"A": "1"})],
            [(("spec", "tolerations"), "all")], [(("spec", "volumes"), [{"name": "x"}])],
            [(("metadata", "name"), 7)], [(("metadata", "labels"), ["a"])],
        ]),
        # what YAML reads and JSON cannot carry (`phalanx validate` reads YAML)
        st.builds(lambda where, value: [(YAML_NATIVE_PATHS[where][0], YAML_NATIVE_PATHS[where][1](value))],
                  st.sampled_from(sorted(YAML_NATIVE_PATHS)), st.sampled_from(YAML_NATIVE)),
        st.deferred(lambda: deep_job),
    )


YAML_NATIVE = (float("nan"), float("inf"), -float("inf"), datetime.date(2024, 1, 1),
               datetime.datetime(2024, 1, 1, 12, 0), b"\x00\xff", {1: "a"}, {True: "a"}, {None: "a"}, {1.5: "a"})
YAML_NATIVE_PATHS = {  # where → (path, the value as that field holds it)
    "image": (("spec", "image"), lambda v: v),
    "nodes": (("spec", "nodes"), lambda v: v),
    "args": (("spec", "args"), lambda v: ["a", v]),
    "env": (("spec", "env"), lambda v: [{"name": "DAY", "value": v}]),
    "nodeSelector": (("spec", "nodeSelector"), lambda v: v if isinstance(v, dict) else {"zone": v}),
    "lr": (("spec", "training", "lr"), lambda v: v),
    "volume": (("spec", "volumes"), lambda v: [{"name": "d", "emptyDir": {"sizeLimit": v}}]),
    "labels": (("metadata", "labels"), lambda v: v if isinstance(v, dict) else {"a": v}),
    "name": (("metadata", "name"), lambda v: v),
}

# Where a deep value goes: inside typed core/v1 sources, typed maps, unknown fields, metadata.
JOB_DEEP_SITES = {
    "emptyDir": lambda d: [(("spec", "volumes"), [{"name": "d", "emptyDir": d}])],
    "csiAttributes": lambda d: [(("spec", "volumes"), [{"name": "d", "csi": {"driver": "x", "volumeAttributes": {"a": d}}}])],
    "projected": lambda d: [(("spec", "volumes"), [{"name": "d", "projected": {"sources": [d]}}])],
    "fieldRef": lambda d: [(("spec", "env"), [{"name": "A", "valueFrom": {"fieldRef": d}}])],
    "checkpoint": lambda d: [(("spec", "checkpoint", "volume"), d)],
    "overrides": lambda d: [(("spec", "model", "overrides"), d)],
    "unknown": lambda d: [(("spec", "unknownField"), d)],
    "nodeSelector": lambda d: [(("spec", "nodeSelector"), {"a": d})],
    "resources": lambda d: [(("spec", "resources", "extra"), {"rdma/hca": d})],
    "roles": lambda d: _roles([{"name": "ps", "env": [{"name": "A", "valueFrom": d}]}]),
    "spec": lambda d: [(("spec",), d)],
    "labels": lambda d: [(("metadata", "labels"), {"a": d})],
    "annotations": lambda d: [(("metadata", "annotations"), d)],
    "managedFields": lambda d: [(("metadata", "managedFields"), [{"fieldsV1": d}])],
}

deep_job = st.builds(lambda site, value: JOB_DEEP_SITES[site](value), st.sampled_from(sorted(JOB_DEEP_SITES)), deep)

# --- Objects -------------------------------------------------------------------------------------

RUNTIME_SPEC = {"image": "phalanx/runtime:test", "nodes": 2, "procsPerNode": 4, "model": {"preset": "debug"},
                "training": {"globalBatchSize": 8}}
COMMAND_SPEC = {"image": "ghcr.io/acme/train:1.0", "nodes": 2, "procsPerNode": 8, "resources": {"gpus": 8},
                "command": COMMAND}
META = {"name": "job", "namespace": "team", "uid": "uid-1", "generation": 1}


def set_path(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = obj
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    if value is None:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def _job(spec: dict[str, Any], edits: list[list[Edit]]) -> dict[str, Any]:
    obj = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": dict(META),
           "spec": copy.deepcopy(spec)}
    for mutation in edits:
        for path, value in mutation:
            set_path(obj, path, copy.deepcopy(value))
    return obj


def job_docs(max_nodes: int = DEFAULT_MAX_PODS, deep_only: bool = False, most: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    """A TrainingJob with 1 to ``most`` mutations (``Deep`` placeholders: see :func:`materialize`);
    ``deep_only``: the first of them a deep value."""
    mutations = job_mutations(max_nodes)
    edits = (st.tuples(deep_job, st.lists(mutations, max_size=most - 1)).map(lambda d: [d[0], *d[1]]) if deep_only
             else st.lists(mutations, min_size=1, max_size=most))
    return st.builds(_job, st.sampled_from((RUNTIME_SPEC, COMMAND_SPEC)), edits)


# Sweeps: the template takes the job's mutations; the sweep's own fields theirs.
POLICY_PARAMETERS = {
    "nodes": [1, 2, 1025, 16385], "elastic.maxNodes": [2, 1025], "serviceAccountName": list(SERVICE_ACCOUNTS[:3]),
    "scheduling.backend": list(BACKENDS), "scheduling.schedulerName": list(SCHEDULERS),
    "scheduling.queue": ["team-a", "x" * 254], "scheduling.priorityClassName": list(PRIORITY_CLASSES),
    "network.profile": ["default", "ib"], "network.hostNetwork": [True, False],
    "failurePolicy.maxRestarts": [3, 10_001], "failurePolicy.backoffSeconds": [0, 86_401],
    "training.lr": [0.1, 1e-05, float("inf"), "0.1", "1e-3"], "training.seed": [0, 2**53],
    "checkpoint.volume.hostPath.path": ["/"], "checkpoint.mountPath": ["/etc/phalanx", "/ckpt"],
    "image": ["x" * 513, "img\U0001f600"], "suspend": [True, "true"], "procsPerNode": [1, 65],
    "network.ncclEnv": ["NVIDIA_VISIBLE_DEVICES=all"], "env": ["A=1"], "tolerations": [[]],
    "metadata.name": ["x"], "": [1], "a..b": [1], "x" * 257: [1],
}


def _parameter(path: str, values: list[Any]) -> dict[str, Any]:
    return {"path": path, "values": values}


def _sweep_mutation_edits(kind: str, data: Any) -> list[Edit]:
    spec = ("spec",)
    if kind == "parameters":
        return [(spec + ("parameters",), data)]
    if kind == "random":
        path, lo, hi, scale = data
        return [(spec + ("algorithm",), "random"), (spec + ("maxTrials",), 3),
                (spec + ("parameters",), [{"path": path, "range": {"min": lo, "max": hi, "scale": scale}}])]
    if kind == "trials":
        return [(spec + ("algorithm",), "list"), (spec + ("parameters",), None), (spec + ("trials",), data)]
    if kind == "deep":
        site, value = data
        return SWEEP_DEEP_SITES[site](value)
    return [(spec + (kind,), data)]


# Where the schema takes any scalar (values, list trials: the CRD keeps unknown fields there but
# no object or list) and typed places.
SWEEP_DEEP_SITES = {
    "values": lambda d: [(("spec", "parameters"), [{"path": "training.lr", "values": [0.1, d]}])],
    "trials": lambda d: [(("spec", "algorithm"), "list"), (("spec", "parameters"), None),
                         (("spec", "trials"), [{"training.lr": d}])],
    "range": lambda d: [(("spec", "parameters"), [{"path": "training.lr", "range": d}])],
    "template": lambda d: [(("spec", "template", "spec", "volumes"), [{"name": "d", "emptyDir": d}])],
    "ensemble": lambda d: [(("spec", "ensemble"), d)],
}

parameter_values = st.sampled_from(sorted(POLICY_PARAMETERS)).flatmap(lambda p: st.one_of(
    st.just(_parameter(p, POLICY_PARAMETERS[p])),
    st.lists(st.one_of(st.sampled_from(POLICY_PARAMETERS.get(p) or [1]), odd_text, near(512),
                       st.just({"a": 1}), st.just([1]), st.none()), min_size=1, max_size=3).map(lambda v: _parameter(p, v))))
sweep_mutations = st.one_of(
    st.lists(parameter_values, min_size=1, max_size=3, unique_by=lambda p: p["path"]).map(
        lambda ps: [(("spec", "parameters"), ps)]),
    st.sampled_from((16, 17)).map(lambda n: [(("spec", "parameters"), [_parameter(f"model.overrides.dim{i}", [64]) for i in range(n)])]),
    st.sampled_from((255, 256, 257)).map(lambda n: [(("spec", "parameters"), [_parameter("training.seed", list(range(n)))])]),
    st.tuples(st.sampled_from(("training.lr", "nodes", "failurePolicy.maxRestarts", "scheduling.priorityClassName")),
              st.sampled_from((0.0, 1e-9, 1.0, 1e308)), st.sampled_from((1e-3, 2000.0, 1e308, float("inf"))),
              st.sampled_from(("linear", "log"))).map(lambda d: _sweep_mutation_edits("random", d)),
    st.one_of(
        st.lists(st.lists(st.sampled_from(sorted(POLICY_PARAMETERS)), min_size=1, max_size=3, unique=True).flatmap(
            lambda paths: st.tuples(*(st.sampled_from(POLICY_PARAMETERS[p]) for p in paths)).map(
                lambda values: dict(zip(paths, values, strict=True)))), min_size=1, max_size=3),
        st.sampled_from((256, 257)).map(lambda n: [{"training.seed": i} for i in range(n)]),
    ).map(lambda t: _sweep_mutation_edits("trials", t)),
    st.fixed_dictionaries({"size": st.sampled_from((1, 3, 256, 257))},
                          optional={"firstSeed": st.sampled_from((0, 2**53))}).map(lambda e: _sweep_mutation_edits("ensemble", e)),
    st.sampled_from((1, 256, 257)).map(lambda n: _sweep_mutation_edits("maxTrials", n)),
    st.sampled_from((1, 257)).map(lambda n: _sweep_mutation_edits("maxParallel", n)),
    st.sampled_from(("sweep", "s" * 41, "s" * 42, "Sweep", "sw\u0301eep", "")).map(_at("metadata", "name")),
    st.deferred(lambda: deep_sweep),
)
deep_sweep = st.tuples(st.sampled_from(sorted(SWEEP_DEEP_SITES)), deep).map(lambda d: _sweep_mutation_edits("deep", d))


def _under_template(edits: list[Edit]) -> list[Edit]:
    return [(("spec", "template", "spec") + path[1:], value) if path[0] == "spec" else (path, value)
            for path, value in edits]


def _sweep(spec: dict[str, Any], edits: list[list[Edit]]) -> dict[str, Any]:
    obj = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingSweep",
           "metadata": {"name": "sweep", "namespace": "team", "uid": "uid-2", "generation": 1},
           "spec": {"template": {"spec": copy.deepcopy(spec)}, "maxParallel": 2,
                    "parameters": [_parameter("training.lr" if "model" in spec else "training.seed", [0.1, 0.2]
                                              if "model" in spec else [1, 2])]}}
    for mutation in edits:
        for path, value in mutation:
            set_path(obj, path, copy.deepcopy(value))
    return obj


def sweep_docs(max_nodes: int = DEFAULT_MAX_PODS, deep_only: bool = False, most: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    mutations = st.one_of(sweep_mutations, job_mutations(max_nodes).map(_under_template))
    deep_one = st.one_of(deep_sweep, deep_job.map(_under_template))
    edits = (st.tuples(deep_one, st.lists(mutations, max_size=most - 1)).map(lambda d: [d[0], *d[1]]) if deep_only
             else st.lists(mutations, min_size=1, max_size=most))
    return st.builds(_sweep, st.sampled_from((RUNTIME_SPEC, COMMAND_SPEC)), edits)


# --- Deep values: placeholders until the example runs --------------------------------------------

PLACEHOLDER = "DEEPVALUEPLACEHOLDER{}"


def _with_placeholders(obj: Any) -> tuple[Any, list[Deep]]:
    """``obj`` with each Deep replaced by a placeholder string (the object is small here)."""
    found: list[Deep] = []

    def walk(node: Any) -> Any:
        if isinstance(node, Deep):
            found.append(node)
            return PLACEHOLDER.format(len(found) - 1)
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(obj), found


def materialize(obj: Any) -> Any:
    """The object itself, each Deep built (iteratively: ``Deep.value``)."""
    def walk(node: Any) -> Any:
        if isinstance(node, Deep):
            return node.value()
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(obj)


def is_json(obj: Any) -> bool:
    """JSON carries ``obj`` as it is (json.dumps would turn a key 1 into "1")."""
    stack = [_with_placeholders(obj)[0]]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if not all(isinstance(k, str) for k in node):
                return False
            stack += node.values()
        elif isinstance(node, list):
            stack += node
        elif not (node is None or isinstance(node, bool | int | str) or (isinstance(node, float) and math.isfinite(node))):
            return False
    return True


def as_json(obj: Any, ascii_only: bool = True) -> str:
    shallow, deeps = _with_placeholders(obj)
    text = json.dumps(shallow, ensure_ascii=ascii_only, allow_nan=False)
    for i, d in enumerate(deeps):
        text = text.replace(json.dumps(PLACEHOLDER.format(i)), d.text(), 1)
    return text


def as_yaml(obj: Any) -> str:
    """Block YAML; a deep value goes in flow style (JSON is YAML flow; block indentation of 10,000
    levels would be 100 MB)."""
    shallow, deeps = _with_placeholders(obj)
    text = yaml.safe_dump(shallow, allow_unicode=True, sort_keys=False, width=1 << 20)
    for i, d in enumerate(deeps):
        assert text.count(PLACEHOLDER.format(i)) == 1
        text = text.replace(PLACEHOLDER.format(i), d.text(), 1)
    return text


def depth(value: Any) -> int:
    """Containers along the deepest path (iterative)."""
    most, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            most = max(most, level)
            stack += [(child, level + 1) for child in (node.values() if isinstance(node, dict) else node)]
    return most


# --- Everything accepted runs within policy -------------------------------------------------------


def _sources(volume: dict[str, Any]) -> list[str]:
    return [k for k in volume if k != "name"]


def _secret_refs(value: Any, path: str) -> list[str]:
    """Paths under ``value`` that name a Secret (iterative)."""
    out, stack = [], [(value, path)]
    while stack:
        node, where = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            if key in SECRET_REF_FIELDS and child is not None:
                out.append(f"{where}.{key}")
            stack.append((child, f"{where}.{key}"))
    return out


def pod_breaches(pod: dict[str, Any]) -> list[str]:
    """What in ``pod`` the default policy must never allow."""
    spec, out = pod["spec"], []
    for v in spec.get("volumes", []):
        kinds = _sources(v)
        if any(k not in SAFE_VOLUME_KINDS for k in kinds):
            out.append(f"volume {v['name']}: {kinds}")
        for source in v.get("projected", {}).get("sources", []):
            bad = [k for k in source if k not in SAFE_PROJECTED_KINDS]
            if bad:
                out.append(f"volume {v['name']}: projected {bad}")
        out += _secret_refs(v, f"volume {v['name']}")
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        for e in c.get("env", []):
            if device_grant_env(e["name"]) and e != OPERATOR_GPU_ENV:
                out.append(f"env {e['name']}={e.get('value')!r}")
        devices = [e for e in c.get("env", []) if device_grant_env(e["name"])]
        if len(devices) > 1:
            out.append(f"env: {len(devices)} device-grant variables")
        out += _secret_refs(c.get("env", []), "env") + _secret_refs(c.get("envFrom", []), "envFrom")
    if spec.get("schedulerName") not in (None, "default-scheduler"):
        out.append(f"schedulerName {spec['schedulerName']}")
    for t in spec.get("tolerations", []):
        if not t.get("key") or t["key"] in FORBIDDEN_TOLERATIONS:
            out.append(f"toleration {t}")
    out += [f"nodeSelector {k}" for k in spec.get("nodeSelector", {}) if k in FORBIDDEN_SELECTORS]
    if str(spec.get("priorityClassName", "")).startswith("system-"):
        out.append(f"priorityClassName {spec['priorityClassName']}")
    # the API server names "default" on every pod; its token is what must stay out
    if spec.get("serviceAccountName") not in (None, "default") or spec.get("automountServiceAccountToken"):
        out.append(f"service account {spec.get('serviceAccountName')!r}, token {spec.get('automountServiceAccountToken')}")
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        out.append("host namespaces")
    return out


def render_breaches(job: Any) -> list[str]:
    """Render the job as the operator does; every pod's breaches. A large gang renders its first
    and last workers and each role's first pod: every other pod is the same but for its rank."""
    every = slots(job.spec)
    if len(every) > DEFAULT_MAX_PODS:
        return [f"{len(every)} pods; the default policy allows {DEFAULT_MAX_PODS}"]
    picked = every if len(every) <= 16 else [every[0], every[job.spec.nodes - 1]] + [
        s for i, s in enumerate(every) if i >= job.spec.nodes and (s.index == 0)]
    children = render_children(job, CONFIG, only=picked)
    pods = [c for c in children if c["kind"] == "Pod"]
    assert len(pods) == len(picked)
    return [f"{p['metadata']['name']}: {b}" for p in pods for b in pod_breaches(p)]


# --- Properties -----------------------------------------------------------------------------------


def _named(problems: list[Any]) -> None:
    for p in problems:
        assert isinstance(p.field, str) and p.field.split(".")[0].split("[")[0] in ("spec", "metadata"), p
        assert isinstance(p.message, str) and p.message.strip(), p


@settings(FUZZ, max_examples=300)
@given(job_docs())
def test_job_verdict_never_raises_and_names_every_field(doc):
    job, problems = validate_job(materialize(doc), CONFIG)
    event("accepted" if not problems else "refused")
    assert job is not None or problems
    _named(problems)


@settings(FUZZ, max_examples=300)
@given(job_docs())
def test_accepted_job_renders_within_the_default_policy(doc):
    job, problems = validate_job(materialize(doc), CONFIG)
    event("accepted" if not problems else "refused")
    if not problems:
        assert render_breaches(job) == []


@settings(FUZZ, max_examples=150)
@given(sweep_docs())
def test_sweep_verdict_never_raises_names_every_field_and_its_trials_run_within_policy(doc):
    expansion = check_sweep(materialize(doc), CONFIG)
    event("accepted" if expansion.valid else "refused")
    assert expansion.sweep is not None or expansion.problems
    _named(expansion.problems)
    if expansion.valid:
        assert expansion.trials
        for trial in {0: expansion.trials[0], -1: expansion.trials[-1]}.values():
            job, problems = validate_job(trial_object(expansion.sweep, trial), CONFIG)
            assert problems == [], (trial.label(), problems)
            assert render_breaches(job) == []


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`phalanx ...` in this process: (exit code, stdout, stderr). stdout is strict UTF-8 as a
    pipe's is, stderr backslash-replaces as Python's does; an escaping exception fails the test
    with its traceback (the real command would print one)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code
        except BaseException:  # noqa: BLE001 - reported as the failure
            pytest.fail(f"phalanx {' '.join(argv)} raised:\n{traceback.format_exc()}")
    out.flush()
    err.flush()
    return code, out.buffer.getvalue().decode(), err.buffer.getvalue().decode()


def _verdict(doc: dict[str, Any]) -> bool:
    obj = materialize(doc)
    if doc["kind"] == "TrainingSweep":
        return check_sweep(obj, CONFIG).valid
    return not validate_job(obj, CONFIG)[1]


@settings(FUZZ, max_examples=80)  # PyYAML reads ~1 MB/s: the budget's largest part
@given(st.one_of(job_docs(), sweep_docs()), st.booleans())
def test_cli_validate_exits_0_or_1_with_the_same_verdict(workdir, doc, ascii_only):
    valid = _verdict(doc)
    texts = {"yaml": as_yaml(doc)}
    if is_json(doc):
        texts["json"] = as_json(doc, ascii_only)
    for suffix, body in texts.items():
        path = workdir / f"doc.{suffix}"
        path.write_text(body, encoding="utf-8")
        code, out, err = run_cli("validate", str(path))
        assert code in (0, 1), (suffix, code, err[-2000:])
        assert "Traceback" not in err
        assert code == (0 if valid else 1), (suffix, valid, err[-2000:])
        if code:
            assert err and all(line.startswith("error: ") for line in err.splitlines() if line), err[-2000:]


@settings(FUZZ, max_examples=80)
@given(st.one_of(job_docs(), sweep_docs(), job_docs(deep_only=True), sweep_docs(deep_only=True)).filter(is_json),
       st.booleans())
def test_safejson_decodes_any_of_them_to_a_bounded_depth(doc, ascii_only):
    value = safejson.loads(as_json(doc, ascii_only))
    assert depth(value) <= safejson.MAX_DEPTH + 1
