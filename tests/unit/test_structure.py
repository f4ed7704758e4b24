"""The code's shape, kept by tests: short functions, and packages that import only downwards.

Layer order of ``phalanx`` (low → high; each imports only from layers below it — see the
docstring of ``phalanx/__init__.py``): constants, problems, decision → api → policy, gang →
backends → render → validate → lifecycle → kube, metrics, jobmetrics, podreflector, leader →
controlloop, offloop → scheduler, expectations → gangstep → jobloop, startup (sweep.loop) → handlers
(sweep.handlers) → main → cli.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "phalanx"
MAX_FUNCTION_LINES = 80
LONG_FUNCTION_ROOTS = (PACKAGE, ROOT / "runtime" / "phalanx_runtime")
# Work in flight elsewhere (the TrainingSweep change), to be removed as it lands — each entry must
# still be true (the ratchet below fails once it is not, so the list only shrinks):
PENDING_LONG: set[str] = set()
PENDING_EDGES: set[tuple[str, str]] = set()


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def test_no_function_is_longer_than_80_lines():
    long = []
    for root in LONG_FUNCTION_ROOTS:
        for path in sorted(root.rglob("*.py")):
            for fn in _functions(path):
                lines = fn.end_lineno - fn.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}() is {lines} lines")
    pending = {x for x in long if x.split(":")[0] + " " + x.split(" ")[1] in PENDING_LONG}
    assert {x.split(":")[0] + " " + x.split(" ")[1] for x in pending} == PENDING_LONG, "PENDING_LONG: drop what was split"
    long = [x for x in long if x not in pending]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them by concern):\n" + "\n".join(long)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    """``phalanx.gang.planner`` → ``phalanx.gang``; ``phalanx.cli`` → ``phalanx.cli``."""
    return ".".join(module.split(".")[:2])


def _imports(path: Path, module: str) -> list[tuple[str, int]]:
    """Every phalanx module ``path`` imports, at any depth (function-local imports count)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            out.append((base, node.lineno))
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]  # `from phalanx import x`
    return [(m, line) for m, line in out if m == "phalanx" or m.startswith("phalanx.")]


def _import_graph() -> dict[str, dict[str, str]]:
    """unit → {imported unit: where}, units being subpackages and top-level modules."""
    known = {_unit(_module_name(p)) for p in PACKAGE.rglob("*.py")}
    graph: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        source = _unit(module)
        for target, line in _imports(path, module):
            unit = _unit(target)
            if unit in known and unit != source and unit != "phalanx":
                graph[source].setdefault(unit, f"{path.relative_to(ROOT)}:{line}")
    return graph


def _find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_packages_import_without_cycles():
    graph = _import_graph()
    assert graph["phalanx.lifecycle"], "the graph is empty: the walk found no imports"
    for a, b in PENDING_EDGES:
        assert b in graph.get(a, {}), f"PENDING_EDGES: {a} → {b} is gone; drop it"
        del graph[a][b]
    cycle = _find_cycle(graph)
    if cycle:
        steps = [f"{a} → {b}  ({graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)]
        raise AssertionError("import cycle between packages (function-local imports count):\n  " + "\n  ".join(steps))


def test_the_shared_decision_types_import_nothing_of_ours():
    path = PACKAGE / "decision.py"
    assert not _imports(path, "phalanx.decision")
    from phalanx.constants import Reason
    from phalanx.decision import GangDecision

    assert GangDecision(release=True).reason == Reason.PLACED


def test_pure_layers_do_not_import_kopf_or_the_kubernetes_client():
    """api, gang, backends, render, policy, validate, lifecycle and decision stay pure."""
    pure = ("api", "gang", "backends", "render", "policy", "lifecycle")
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] not in pure and rel.name not in ("validate.py", "decision.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] in ("kopf", "kubernetes") for n in names):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders, offenders


def test_unit_tests_mirror_the_packages():
    """tests/unit/phalanx/<path>/test_<module>.py tests operator/phalanx/<path>/<module>.py (and
    tests/unit/phalanx_common/, tests/unit/phalanx_runtime/ the shared package's and the runtime's):
    a test file named after no module is an orphan.
    A package's ``__init__.py`` is tested by test_init.py or test_<package>.py."""
    unit = ROOT / "tests" / "unit"
    sources = {"phalanx": PACKAGE.parent, "phalanx_common": ROOT / "common", "phalanx_runtime": ROOT / "runtime"}
    orphans = []
    for top, source_root in sources.items():
        for path in sorted((unit / top).rglob("*.py")):
            if not (path.name.startswith("test_") or path.stem.endswith("_test")):
                continue  # __init__.py, helper modules
            package = source_root / path.parent.relative_to(unit)
            module = path.stem.removeprefix("test_")
            init = module in ("init", package.name) and (package / "__init__.py").is_file()
            if not path.name.startswith("test_"):
                orphans.append(f"{path.relative_to(ROOT)}: not named test_<module>.py")
            elif not ((package / f"{module}.py").is_file() or init):
                orphans.append(f"{path.relative_to(ROOT)}: no {package.relative_to(ROOT)}/{module}.py")
    assert not orphans, "unit test files named after no module:\n  " + "\n  ".join(orphans)


# --- Framework and backend plugins: no switch on their names outside them ------------------------
# A framework's own modules: its rules (api/<name>.py: the CRD's CEL compares the name too) and its
# plugin (frameworks/<name>.py); a backend's: backends/<name>.py. Everyone else asks the registries
# (phalanx.frameworks.plugin_for, phalanx.backends.backend_for / backend_named).


def _enum_values(enum: type) -> set[str]:
    return {member.value for member in enum}


def _switches(tree: ast.AST, names: set[str]):
    """(line, name) of every comparison with a string constant of ``names``: ``x == 'name'``,
    ``x != 'name'``, ``x in ('name', ...)``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in (node.left, *node.comparators):
            items = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
            for item in items:
                if isinstance(item, ast.Constant) and item.value in names:
                    yield node.lineno, item.value


def _own_modules(kind: str, name: str) -> set[str]:
    return {f"api/{name}.py", f"frameworks/{name}.py"} if kind == "framework" else {f"backends/{name}.py"}


def test_framework_and_backend_names_are_compared_only_in_their_own_modules():
    from phalanx.api.types import Framework, GangBackend

    # "none" is also a value of other enums (gradCompression, activationCheckpointing)
    kinds = {"framework": _enum_values(Framework) - {Framework.NONE.value}, "backend": _enum_values(GangBackend)}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        tree = ast.parse(path.read_text(), str(path))
        for kind, names in kinds.items():
            for line, name in _switches(tree, names):
                if rel not in _own_modules(kind, name):
                    offenders.append(f"{rel}:{line} compares with the {kind} name {name!r}")
    assert not offenders, "ask the plugin registry instead:\n" + "\n".join(offenders)


def test_framework_and_backend_members_are_compared_only_by_their_plugins():
    """``spec.framework == Framework.X`` belongs in frameworks/, ``== GangBackend.X`` in backends/."""
    owners = {"Framework": "frameworks", "GangBackend": "backends"}
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Compare):
                continue
            for operand in (node.left, *node.comparators):
                if (isinstance(operand, ast.Attribute) and isinstance(operand.value, ast.Name)
                        and operand.value.id in owners and rel.split("/")[0] != owners[operand.value.id]):
                    found.add(f"{rel} {operand.value.id}.{operand.attr}")
    assert not found, "ask the plugin registry instead:\n" + "\n".join(sorted(found))


def test_handlers_only_register():
    """handlers.py is kopf's wiring: every function is a kopf handler (or a helper of a few lines
    that an index reads), no classes, no state — the work lives in the modules they hand on to."""
    path = PACKAGE / "handlers.py"
    problems = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            problems.append(f"handlers.py:{node.lineno} class {node.name}: move it to the module that uses it")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            kopf_decorated = any(ast.unparse(d).startswith("kopf.") for d in node.decorator_list)
            if not kopf_decorated and not (node.name.startswith("_") and node.end_lineno - node.lineno < 5):
                problems.append(f"handlers.py:{node.lineno} {node.name}() is no kopf handler")
            elif kopf_decorated and node.end_lineno - node.lineno > 25:
                problems.append(f"handlers.py:{node.lineno} {node.name}() does work: hand it on to a module")
        elif isinstance(node, ast.Assign | ast.AnnAssign) and ast.unparse(node).split("=")[0].strip() != "log":
            problems.append(f"handlers.py:{node.lineno} module state {ast.unparse(node)[:40]!r}")
    assert not problems, "\n".join(problems)


# --- The three packages: the runtime and the operator apart, the shared package under both -------
RUNTIME = ROOT / "runtime" / "phalanx_runtime"
COMMON = ROOT / "common" / "phalanx_common"


def _top_level_imports(root: Path) -> dict[str, list[str]]:
    """Top-level package → where the package under ``root`` imports it (any depth, function-local
    and ``if TYPE_CHECKING`` imports included; relative imports are the package's own)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                found[name.split(".")[0]].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_runtime_imports_neither_the_operator_nor_kopf_nor_the_kubernetes_client():
    imports = _top_level_imports(RUNTIME)
    assert imports["phalanx_common"], "the walk found no imports"
    offenders = {name: imports[name] for name in ("phalanx", "kopf", "kubernetes") if imports.get(name)}
    assert not offenders, f"the runtime is a package of its own (its config: phalanx_runtime.config): {offenders}"


def test_the_operator_never_imports_the_runtime():
    """``phalanx local`` starts the runtime by command line (python -m phalanx_runtime...)."""
    imports = _top_level_imports(PACKAGE)
    assert imports["phalanx_common"], "the walk found no imports"
    assert not imports.get("phalanx_runtime"), imports.get("phalanx_runtime")


# The ready-made callbacks import the library they plug into (the user's script imports them,
# nothing of ours does); every other module of the shared package is standard library only.
INTEGRATION_IMPORTS = {"integrations/transformers.py": {"transformers"},
                       "integrations/lightning.py": {"lightning", "pytorch_lightning"}}


def test_the_shared_package_imports_only_the_standard_library():
    """Both images install it: no kopf, kubernetes client, pydantic or torch, and neither package
    it serves."""
    import sys

    imports = _top_level_imports(COMMON)
    assert imports["os"], "the walk found no imports"
    allowed = {(str((COMMON / module).relative_to(ROOT)), name)
               for module, names in INTEGRATION_IMPORTS.items() for name in names}
    foreign = {name: [at for at in where if (at.rpartition(":")[0], name) not in allowed]
               for name, where in imports.items()
               if name not in sys.stdlib_module_names and name not in ("__future__", "phalanx_common")}
    foreign = {name: where for name, where in foreign.items() if where}
    assert not foreign, foreign
    used = {(at.rpartition(":")[0], name) for name, where in imports.items() for at in where}
    assert allowed <= used, f"INTEGRATION_IMPORTS names an import no longer there: {sorted(allowed - used)}"
    assert not {"phalanx", "phalanx_runtime", "kopf", "kubernetes"} & set(imports)


def test_no_function_of_the_shared_package_is_longer_than_80_lines():
    long = [f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}()" for path in sorted(COMMON.rglob("*.py"))
            for fn in _functions(path) if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long


def test_no_single_letter_import_aliases():
    """``constants.LABEL_JOB_NAME``, not ``C.LABEL_JOB_NAME``: a reader sees where a name comes from.
    torch's own idiom (``torch.nn.functional as F``) is the one every torch reader knows."""
    found = []
    for root in (PACKAGE, ROOT / "common" / "phalanx_common", ROOT / "runtime" / "phalanx_runtime"):
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found += [f"{path.relative_to(ROOT)}:{node.lineno} as {a.asname}" for a in node.names
                              if a.asname and len(a.asname) == 1 and a.name != "torch.nn.functional"]
    assert not found, found
