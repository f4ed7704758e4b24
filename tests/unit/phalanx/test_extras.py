"""Every CLI command with README's install (the operator extra only): it works, or exits 1 with
one line naming the extra it needs — never a traceback. The runtime's, hf's and plot's modules
are made unimportable in each command's process (a sitecustomize on its path)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phalanx.cli import build_parser
from phalanx.extras import COMMAND_NEEDS, extra_problem

ROOT = Path(__file__).resolve().parents[3]
# what the runtime, hf, plot, deepspeed and trainers extras install (top-level modules)
NOT_INSTALLED = ("torch", "numpy", "tokenizers", "transformers", "safetensors", "matplotlib", "pyarrow",
                 "datasets", "accelerate", "deepspeed", "jinja2", "peft", "fsspec", "s3fs", "gcsfs")


@pytest.fixture(scope="module")
def operator_only(tmp_path_factory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("operator-extra-only")
    (site / "sitecustomize.py").write_text(textwrap.dedent(f"""
        import sys
        BLOCKED = {NOT_INSTALLED!r}
        class NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None
        sys.meta_path.insert(0, NotInstalled())
    """))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def phalanx(env, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "phalanx", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_blocker_blocks(operator_only):
    done = subprocess.run([sys.executable, "-c", "import torch"], env=operator_only, capture_output=True, text=True)
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr


def test_every_command_has_help(operator_only):
    commands = [name for action in build_parser()._subparsers._group_actions for name in action.choices]
    script = ("import sys\nfrom phalanx.cli import main\nbad = []\n"
              f"for argv in {[[c, '--help'] for c in commands] + [['data', 'prepare', '--help']]!r}:\n"
              "    try:\n        main(argv)\n    except SystemExit as e:\n        bad += [argv] if e.code else []\n"
              "print(bad)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=operator_only, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip().endswith("[]"), done.stderr[-2000:]


@pytest.mark.parametrize("args", [
    ["render", "examples/first-job.yaml"],
    ["validate", "examples/first-job.yaml"],
    ["crd"],
    ["plan", "examples/3d-pp-dp-tp.yaml", "--nodes", "examples/nodes-fattree-16.yaml"],
])
def test_offline_commands_work(operator_only, args):
    done = phalanx(operator_only, *args)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(("args", "extras", "missing"), [
    (["local", "examples/first-job.yaml"], "runtime", "torch"),
    (["export", "ckpt", "--out", "out"], "runtime,hf", "torch"),
    (["data", "prepare", "--input", "in.jsonl", "--out", "out", "--tokenizer", "tok"], "runtime,hf", "tokenizers"),
    (["plot", "ckpt"], "plot", "matplotlib"),
])
def test_commands_that_need_an_extra_say_which(operator_only, tmp_path, args, extras, missing):
    _says_which(operator_only, tmp_path, args, extras, missing)


def test_plot_of_a_uri_names_the_objectstore_extra(tmp_path):
    """With matplotlib but without fsspec: the object-storage part of plot."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import sys
        class NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("fsspec", "s3fs", "gcsfs"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None
        sys.meta_path.insert(0, NotInstalled())
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    _says_which(env, tmp_path, ["plot", "s3://ckpt/team/job"], "objectstore", "fsspec")


def test_the_objectstore_extra_is_the_runtimes_pins():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["objectstore"]) <= set(extras["runtime"])
def _says_which(env, tmp_path, args, extras, missing):
    done = phalanx(env, *[str(ROOT / a) if a.startswith("examples/") else a for a in args], cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"pip install 'phalanx[{extras}]'" in line and missing in line


def test_cluster_commands_without_a_cluster_say_so(operator_only, tmp_path):
    done = phalanx(operator_only, "watch", "x", "--kubeconfig", str(tmp_path / "none"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_needs_are_pyproject_extras():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for needs in COMMAND_NEEDS.values():
        assert set(needs.extras) <= set(extras)
    assert extra_problem("plot") is None  # here, where the dev extras are installed
