"""The package's own source files: what a module runs, and a fingerprint of it.

dvc.yaml's deps must list every file a stage runs (tests/unit/core/test_fingerprint.py
checks that), and a saved training run resumes only under the code that wrote it
(pipeline/training/state.py compares fingerprints).
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.name  # "pipeline"


def module_file(name: str) -> Path | None:
    """pipeline.a.b -> pipeline/a/b.py, or pipeline/a/b/__init__.py; None for a name that is no module."""
    parts = name.split(".")
    if parts[0] != ROOT:
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for path in (base.with_suffix(".py") if len(parts) > 1 else None, base / "__init__.py"):
        if path is not None and path.is_file():
            return path
    return None


def module_closure(module: str) -> list[Path]:
    """The source files of `module` and of every pipeline module it imports, transitively.

    Read from the import statements (ast), not from sys.modules, so the answer does
    not depend on what else the process imported. Importing pipeline.a.b runs
    pipeline/__init__.py and pipeline/a/__init__.py first, so those count too. A
    name that maps to no file must be a name defined in a module (`from pipeline.a
    import f`); anything else under `pipeline.` is an error, never skipped.
    """
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = module_file(name)
        if path is None:
            raise ValueError(f"{name}: no such module in {PACKAGE}")
        seen[name] = path
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo += [p for p in parents if p not in seen]
        for imported in _imports(path):
            if module_file(imported) is not None:
                todo.append(imported)
    return sorted(set(seen.values()))


def _imports(path: Path) -> list[str]:
    """Every pipeline module `path` may import: `import a.b`, and `from a import b` as a and a.b."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == ROOT]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == ROOT:
            found.append(node.module)
            # `from pipeline.a import b`: b is a submodule or a name; a submodule counts.
            found += [f"{node.module}.{a.name}" for a in node.names if module_file(f"{node.module}.{a.name}")]
    return found


def fingerprint(module: str) -> dict[str, str]:
    """sha256 of every file `module` runs, keyed by its path inside the package (a/b.py)."""
    return {
        path.relative_to(PACKAGE).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in module_closure(module)
    }
