"""The package's layers: imports flow one way (stages -> training -> decoding / reporting ->
model / data / tracking -> core), no import cycles, and a light command stays light; and in bench/,
no module imports a benchmark."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.fingerprint import PACKAGE, ROOT, module_file
from tests.support.repo import REPO

BENCH = REPO / "bench"

# Each subpackage's layer; the modules at the top of the package are the core (layer 0).
# A module may import its own subpackage and any lower layer, never a sibling of its own layer.
# training sits above decoding: validation decodes greedily to score BLEU; so do interop (CTranslate2
# decodes with search's rules), reporting (the heatmaps decode) and serving (which serves the torch
# or the CTranslate2 translator). tracking (MLflow) sits below every layer that logs to a run or
# reads mlflow_run.json, and imports only the core.
LAYERS = {
    "params": 0,  # the core's, as its modules (errors, files, tokens): every layer reads its settings
    "model": 1,
    "data": 1,
    "tracking": 1,
    "decoding": 2,
    "reporting": 3,
    "training": 3,
    "interop": 3,
    "serving": 4,
    "experiments": 4,  # queues DVC runs of recipes, reads them back, writes their tables
    "stages": 5,
}
ENTRY = {"cli": 6, "__main__": 7}  # `python -m pipeline`: __main__ runs cli, which dispatches to the stages


def modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        names.append(".".join((ROOT, *parts)))
    return names


def imports(name: str) -> set[str]:
    """The pipeline modules `name` imports anywhere in its file (inside functions too)."""
    path = module_file(name)
    assert path is not None
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == ROOT}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == ROOT:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            found |= {s for s in subs if module_file(s)} or {node.module}
    return {m for m in found if module_file(m)} - {name}


def layer(name: str) -> tuple[str, int]:
    """(subpackage, layer) of a module: ("", 0) for the core, above the stages for the entry point."""
    parts = name.split(".")[1:]
    if not parts:
        return "", 0
    if parts[0] in LAYERS:
        return parts[0], LAYERS[parts[0]]
    return "", ENTRY.get(parts[0], 0)


def test_every_subpackage_has_a_layer():
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == set(LAYERS)


@pytest.mark.parametrize("name", modules())
def test_imports_flow_down_the_layers(name: str):
    package, level = layer(name)
    for imported in imports(name):
        other, other_level = layer(imported)
        if other == package and package:
            continue  # within one subpackage
        assert other_level < level or (other_level == 0 and level == 0), (
            f"{name} (layer {level}) imports {imported} (layer {other_level}): a lower layer must not "
            "import a higher one, nor a sibling of its own layer"
        )


def test_a_stage_imports_no_other_stage():
    for name in modules():
        if name.startswith(f"{ROOT}.stages.") and name != f"{ROOT}.stages.options":
            others = {m for m in imports(name) if m.startswith(f"{ROOT}.stages.")} - {
                f"{ROOT}.stages.options"
            }
            assert not others, (
                f"{name} imports the stage(s) {sorted(others)}: move what they share down a layer"
            )


def test_no_import_cycles():
    graph = {name: imports(name) for name in modules()}
    # A package's __init__ is imported by every module in it; only the module-to-module edges can cycle.
    graph = {n: {m for m in deps if not n.startswith(m + ".")} for n, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])


def bench_modules() -> dict[str, Path]:
    """bench.<name> -> its file, for every module under bench/ and its folders."""
    found = {}
    for path in sorted(BENCH.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def bench_imports(path: Path, known: set[str]) -> set[str]:
    """The bench modules (of `known`) that the file at `path` imports anywhere (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known  # from bench import decoding
            found |= subs or {node.module}
    return found & known


def is_benchmark(path: Path) -> bool:
    """A benchmark is a command, `python -m bench.<name>`: its module has an `if __name__ == "__main__":`."""
    return any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        for node in ast.parse(path.read_text(encoding="utf-8")).body
    )


def test_no_bench_module_imports_a_benchmark():
    """What two benchmarks share lives in a shared module (bench/common.py, training.py, decoding.py,
    timing.py, ...), so a benchmark's internals are its own and each runs and changes alone."""
    modules = bench_modules()
    benchmarks = {name for name, path in modules.items() if is_benchmark(path)}
    assert {"bench.train_speed", "bench.decode_speed", "bench.efficiency"} <= benchmarks
    for name, path in modules.items():
        imported = bench_imports(path, set(modules)) & benchmarks - {name}
        assert not imported, (
            f"{name} imports the benchmark(s) {sorted(imported)}: move what they share into a shared "
            "bench module, imported by both"
        )


# (command, a module it must have loaded: the proof that the import log was read and the command ran)
LIGHT_COMMANDS = [(["download", "--help"], "click"), (["corpora", "--pair", "de-en"], "yaml")]


@pytest.mark.parametrize(("command", "loaded"), LIGHT_COMMANDS)
def test_light_commands_import_neither_torch_nor_matplotlib_nor_transformers(command: list[str], loaded: str):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pipeline", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line
    }
    assert loaded in imported
    heavy = {"torch", "matplotlib", "transformers"}
    assert not imported & heavy, sorted(imported & (heavy | {"pandas"}))


@pytest.mark.parametrize("command", ["import-hf", "export-hf"])
def test_the_hf_commands_import_transformers_only_when_they_run(command: str):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pipeline", command, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert f"Usage: python -m pipeline {command}" in result.stdout
    assert f"pipeline.interop.hf_{command.removesuffix('-hf')}" in imported
    assert not {name for name in imported if name.split(".")[0] in ("transformers", "safetensors")}


@pytest.mark.parametrize("name", modules())
def test_module_docstrings_are_short(name: str):
    """What and why, briefly: a longer design note belongs in docs/, linked from the module."""
    path = module_file(name)
    assert path is not None
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""
    assert doc, f"{path.relative_to(REPO)} has no module docstring"
    assert len(doc.strip().splitlines()) <= 15, f"{path.relative_to(REPO)}: module docstring over 15 lines"


# Unit tests that mirror no one module: this file checks the package as a whole.
NOT_A_MODULE = {"core/test_layout.py", "core/test_docs.py", "core/test_committed_paths.py"}


def test_unit_tests_mirror_the_modules():
    """tests/unit/<package>/test_<m>.py tests pipeline/<package>/<m>.py (for core: pipeline/<m>.py)."""
    unit = REPO / "tests" / "unit"
    orphans = []
    for test in sorted(unit.glob("*/test_*.py")):
        package, module = test.parent.name, test.stem.removeprefix("test_")
        source = PACKAGE / module if package == "core" else PACKAGE / package / module
        if not source.with_suffix(".py").is_file() and test.relative_to(unit).as_posix() not in NOT_A_MODULE:
            orphans.append(test.relative_to(REPO).as_posix())
    assert not orphans, f"{orphans} mirror no module: name each test_<module>.py for the module it tests"


MAX_CLASS_LINES, MAX_FUNCTION_LINES = 300, 60
LIMITS = {
    ast.ClassDef: MAX_CLASS_LINES,
    ast.FunctionDef: MAX_FUNCTION_LINES,
    ast.AsyncFunctionDef: MAX_FUNCTION_LINES,
}


def oversized_units() -> dict[str, int]:
    """'path:name' -> lines of every class over MAX_CLASS_LINES and function over MAX_FUNCTION_LINES."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LIMITS[type(node)]:
                    found[f"{path.relative_to(REPO).as_posix()}:{node.name}"] = lines
    return found


def test_no_class_over_300_lines_and_no_function_over_60():
    """A unit one can hold in the head: split a larger one by what its parts do."""
    found = oversized_units()
    assert not found, f"over {MAX_CLASS_LINES} lines a class or {MAX_FUNCTION_LINES} a function: {found}"
