"""What a CLI command needs beyond README's install (``pip install -e '.[operator]'``): the
extras of pyproject.toml whose modules it imports, checked before it starts, so a missing one
ends in one line naming the extra (exit 1) instead of a traceback from a child process.

The module lists name each extra's top-level imports the command reaches (``tokenizers`` comes
with ``transformers`` in ``hf``); ``tests/unit/phalanx/test_extras.py`` runs every command with
those modules unimportable."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Needs:
    extras: tuple[str, ...]  # pyproject.toml optional-dependencies
    modules: tuple[str, ...]  # top-level modules those extras install that the command imports


RUNTIME = Needs(("runtime",), ("torch", "numpy"))
COMMAND_NEEDS: dict[str, Needs] = {
    "local": RUNTIME,  # a built-in model job; a command job runs the user's command and needs none
    "export": Needs(("runtime", "hf"), ("torch", "numpy", "safetensors", "s3fs", "gcsfs")),
    "data prepare": Needs(("runtime", "hf"), ("numpy", "tokenizers")),
    "plot": Needs(("plot",), ("matplotlib",)),
    "plot <uri>": Needs(("objectstore",), ("fsspec", "s3fs", "gcsfs")),  # a log in object storage
}


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The modules that cannot be imported here (not imported: finding them is enough)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def extra_problem(command: str) -> str | None:
    """'phalanx data prepare needs the runtime and hf extras: pip install 'phalanx[runtime,hf]'
    (missing: tokenizers)', or None when everything it needs is here."""
    needs = COMMAND_NEEDS[command]
    missing = missing_modules(needs.modules)
    if not missing:
        return None
    names = " and ".join(needs.extras)
    plural = "s" if len(needs.extras) > 1 else ""
    return (f"phalanx {command} needs the {names} extra{plural}: pip install 'phalanx[{','.join(needs.extras)}]' "
            f"(or -e '.[{','.join(needs.extras)}]' in a checkout; missing: {', '.join(missing)})")
