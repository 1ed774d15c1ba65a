"""Experiments as data: the folder experiments/ holds what the pairs' experiments are made of.

    experiments/pairs.yaml          per pair, a base of params.yaml settings (and why)
    experiments/recipes/NAME.yaml   a named set of settings over a pair's base, and per pair more
    experiments/grid.yaml           the sweep's axes: axis -> value -> settings
    experiments/ablation.yaml       named variants of params.yaml alone

Settings are dotted params keys, as `dvc exp run -S` takes them. An experiment is params.yaml, then
its pair's base, then its recipe's settings, then (a sweep's variant) one axis value; the values are
checked as params when one is queued (`variant_params`), and queued as `dvc exp run -S` takes
them (`settings`). A file of the wrong shape is refused naming file and key.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import files
from pipeline import params as P
from pipeline.errors import ParamsError, UserError
from pipeline.params.coerce import param_text

EXPERIMENTS = Path("experiments")
Settings = dict[str, Any]  # dotted params key -> value


@dataclass(frozen=True)
class Pair:
    name: str  # src-tgt, the prefix of its experiments' names
    base: Settings  # over params.yaml: the README's command on the pair's data
    why: str

    @property
    def tests(self) -> list[str]:
        return [str(n) for n in self.base.get("data.test", [])]


@dataclass(frozen=True)
class Recipe:
    name: str
    what: str  # one line: what it sets
    why: str  # and on whose evidence
    changes: Settings  # over the pair's base
    per_pair: dict[str, Settings] = field(default_factory=dict)  # pair -> further changes
    only: tuple[str, ...] = ()  # the pairs it is for (none: all)
    parent: dict[str, str] = field(default_factory=dict)  # pair -> the experiment it starts from (init_from)

    def for_pair(self, pair: str) -> Settings:
        return {**self.changes, **self.per_pair.get(pair, {})}

    def applies(self, pair: str) -> bool:
        return not self.only or pair in self.only


def dvc_binary() -> str:
    """The dvc beside this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "dvc"
    return str(beside) if beside.exists() else (shutil.which("dvc") or "dvc")


def settings(changes: dict[str, object]) -> list[str]:
    """A variant's changes as `dvc exp run -S` takes them, spelled as in params.yaml (false, null). A
    mapping is set with Hydra's `++` (add or override): plain `key=` merges into the mapping
    params.yaml has and refuses the keys it lacks (data.sources is {} there)."""
    return [
        f"{'++' if isinstance(value, dict) else ''}{key}={param_text(value)}"
        for key, value in changes.items()
    ]


def variant_params(raw: dict[str, Any], changes: dict[str, object]) -> P.Params:
    """params.yaml's raw mapping with `changes` applied, validated (ParamsError names a bad one)."""
    raw = json.loads(json.dumps(raw))  # a deep copy
    for key, value in changes.items():
        *path, name = key.split(".")
        node = raw
        for part in path:  # a key params.yaml lacks is left for from_dict to name
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ParamsError(f"{key}: {part} is a setting, not a section of settings")
        node[name] = value
    return P.from_dict(raw)


def _read(path: Path) -> dict[str, Any]:
    raw = files.read_yaml(path, "experiments/ comes with the repository")
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping of names to entries")
    return raw


def _settings(value: Any, where: str) -> Settings:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and "." in k for k in value):
        raise UserError(f"{where}: expected settings, a mapping of dotted params keys (train.lr: 0.001)")
    return dict(value)


def _entry(raw: dict[str, Any], keys: set[str], where: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or set(raw) - keys:
        unknown = sorted(set(raw) - keys) if isinstance(raw, dict) else []
        raise UserError(f"{where}: unknown key(s) {unknown}; the keys are {sorted(keys)}")
    return raw


def load_pairs(root: Path = EXPERIMENTS) -> dict[str, Pair]:
    """experiments/pairs.yaml, in its order (the order of the results' sections)."""
    path = root / "pairs.yaml"
    out = {}
    for name, raw in _read(path).items():
        entry = _entry(raw, {"why", "set"}, f"{path}: {name}")
        out[name] = Pair(name, _settings(entry.get("set"), f"{path}: {name}.set"), str(entry.get("why", "")))
    return out


def load_recipes(pairs: dict[str, Pair], root: Path = EXPERIMENTS) -> dict[str, Recipe]:
    """experiments/recipes/*.yaml by name; a pair named in one must be a pair of pairs.yaml."""
    out = {}
    for path in sorted((root / "recipes").glob("*.yaml")):
        raw = _entry(_read(path), {"what", "why", "set", "per_pair", "only", "parent"}, str(path))
        named = [*(raw.get("per_pair") or {}), *(raw.get("only") or []), *(raw.get("parent") or {})]
        if unknown := sorted(set(named) - set(pairs)):
            raise UserError(
                f"{path}: pair(s) {unknown} are not in {root / 'pairs.yaml'} ({', '.join(pairs)})"
            )
        per_pair = {p: _settings(s, f"{path}: per_pair.{p}") for p, s in (raw.get("per_pair") or {}).items()}
        out[path.stem] = Recipe(
            path.stem,
            str(raw.get("what", "")),
            str(raw.get("why", "")),
            _settings(raw.get("set"), f"{path}: set"),
            per_pair,
            tuple(raw.get("only") or ()),
            {str(p): str(e) for p, e in (raw.get("parent") or {}).items()},
        )
    return out


def load_variants(path: Path = EXPERIMENTS / "ablation.yaml") -> dict[str, Recipe]:
    """Named sets of settings over params.yaml itself (what, set), in the file's order."""
    out = {}
    for name, raw in _read(path).items():
        entry = _entry(raw, {"what", "why", "set"}, f"{path}: {name}")
        changes = _settings(entry.get("set"), f"{path}: {name}.set")
        out[name] = Recipe(name, str(entry.get("what", "")), str(entry.get("why", "")), changes)
    return out


def load_grid(root: Path = EXPERIMENTS) -> dict[str, dict[str, Settings]]:
    """experiments/grid.yaml: axis -> value label -> settings, in the file's order."""
    path = root / "grid.yaml"
    grid = {}
    for axis, values in _read(path).items():
        if not isinstance(values, dict) or not values:
            raise UserError(f"{path}: {axis}: expected value labels, each with its settings")
        grid[str(axis)] = {str(v): _settings(s, f"{path}: {axis}.{v}") for v, s in values.items()}
    return grid


def read_raw(params_file: Path) -> dict[str, Any]:
    """params.yaml as written: the base every experiment's settings go over."""
    raw = files.read_yaml(params_file, "run from the repository root or pass --params")
    if not isinstance(raw, dict):
        raise UserError(f"{params_file}: not a mapping of sections; give the project's params.yaml")
    return raw
