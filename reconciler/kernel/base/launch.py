"""How the kernel starts a Python module of its own: isolated. Trusted harness.

Rule: a kernel's own processes (its broker; a stored kernel's entry point,
started by the control plane) run ``python -I`` (no ``PYTHON*`` variable, no
user site, no working directory on ``sys.path``) in a working directory outside
the kernel, and import nothing from the folder the kernel's package sits in
but that package: ``BOOTSTRAP`` loads the package's top from its own
``__init__.py`` by path, and runs the module as ``__main__`` from there. A
file planted beside the package (a ``json.py`` in a store entry) is never on
``sys.path``, so it is never imported, whatever the working directory holds.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["BOOTSTRAP", "module_command"]

# argv: <folder the package is in> <module to run as __main__>. The top package is
# loaded from <folder>/<top>/__init__.py; its sub-modules then come from its own
# __path__, never from sys.path.
BOOTSTRAP = (
    "import importlib.util, os, runpy, sys\n"
    "root, module = sys.argv[1:3]\n"
    "del sys.argv[1:3]\n"
    "top = module.partition('.')[0]\n"
    "folder = os.path.join(root, top)\n"
    "spec = importlib.util.spec_from_file_location(\n"
    "    top, os.path.join(folder, '__init__.py'), submodule_search_locations=[folder])\n"
    "package = importlib.util.module_from_spec(spec)\n"
    "sys.modules[top] = package\n"
    "spec.loader.exec_module(package)\n"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
)


def module_command(root: Path, module: str, *, executable: str | None = None,
                   no_bytecode: bool = False) -> list[str]:
    """The argv that runs ``module`` (``python -m`` style) from the package tree at ``root``
    (the folder its top package is in), isolated; ``no_bytecode`` adds ``-B``."""
    return [executable or sys.executable, "-I", *(["-B"] if no_bytecode else []),
            "-c", BOOTSTRAP, str(root), module]
