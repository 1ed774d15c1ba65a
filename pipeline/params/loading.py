"""Loading params.yaml: read, type-checked and validated once, at the CLI boundary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import ParamsError
from pipeline.params.checks import validate
from pipeline.params.coerce import build
from pipeline.params.schema import Params


def load(path: str | Path = "params.yaml") -> Params:
    """Read, type-check and validate params.yaml; raise ParamsError on any fault."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParamsError(f"{path}: no such file; run from the repository root or pass --params") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from e
    return from_dict(raw)


def from_dict(raw: Any) -> Params:
    """Build Params from a plain nested dict (as read from YAML or a checkpoint)."""
    params = build(Params, raw, "")
    validate(params)
    return params
