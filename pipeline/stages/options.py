"""What every stage command shares: the --params option and loading it once."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import params as P

params_option = click.option(
    "--params",
    "params_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default="params.yaml",
    show_default=True,
    help="The params file (dvc.yaml passes the repository's).",
)


def load_params(params_file: Path) -> P.Params:
    """Load and validate; a bad key or value exits 2 with a one-line message."""
    return P.load(params_file)


def module_closure(module: str) -> list[Path]:
    """The source files of `module` and of every pipeline module it imports, transitively.

    Read from the import statements (ast), not from sys.modules, so the answer
    does not depend on what else the process imported (the CLI imports every
    stage). What a stage's dvc.yaml deps must list, and what the train stage
    fingerprints to tell whether a saved run came from the same code.
    """
    import ast

    package = Path(__file__).resolve().parent
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = package / (name.split(".", 1)[1].replace(".", "/") + ".py") if "." in name else None
        if name in seen or path is None or not path.is_file():
            continue  # seen, the package itself, or a name imported from a module
        seen[name] = path
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] == "pipeline"]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pipeline":
                # from pipeline import x: x may be a module
                todo += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return sorted(seen.values())
