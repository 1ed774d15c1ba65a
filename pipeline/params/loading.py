"""Loading params.yaml: read, type-checked and validated once, at the CLI boundary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import files
from pipeline.errors import ParamsError
from pipeline.params.checks import validate
from pipeline.params.coerce import build
from pipeline.params.schema import Params


def load(path: str | Path = "params.yaml") -> Params:
    """Read, type-check and validate params.yaml; raise ParamsError on any fault."""
    path = Path(path)
    return from_dict(files.read_yaml(path, "run from the repository root or pass --params", ParamsError))


def from_dict(raw: Any) -> Params:
    """Build Params from a plain nested dict (as read from YAML or a checkpoint)."""
    params = build(Params, raw, "")
    validate(params)
    return params
