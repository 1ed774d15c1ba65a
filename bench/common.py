"""What the benchmark scripts share: one reports/bench.json of rows, one reports/bench.md of sections."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from pipeline import params as P
from pipeline.files import write_text


@dataclass(frozen=True)
class Size:
    """A model's dimensions, for the benchmarks' tiny model; the rest of its section stays."""

    d_model: int
    n_heads: int
    d_ff: int
    n_layers: int  # each side's: encoder_layers and decoder_layers follow it

    def of(self, model: P.ModelParams) -> P.ModelParams:
        """`model` at these dimensions."""
        return dataclasses.replace(
            model,
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            n_layers=self.n_layers,
            encoder_layers=None,
            decoder_layers=None,
        )


TINY = Size(32, 2, 64, 1)  # trains and decodes in seconds: the smoke runs' model


def row(system: str, task: str, precision: str, metric: str, value: float, digits: int = 1) -> dict:
    """One result of the model benchmarks (train_speed, decode_speed), its value rounded."""
    return {
        "system": system,
        "task": task,
        "precision": precision,
        "metric": metric,
        "value": round(float(value), digits),
    }


def markers(name: str, device: str = "cpu") -> tuple[str, str]:
    """A report section's start and end comments: `name`'s, `name-cuda`'s for a GPU run's."""
    tag = name if device == "cpu" else f"{name}-{device}"
    return f"<!-- {tag}:start -->", f"<!-- {tag}:end -->"


def merge_rows(path: Path, rows: list[dict]) -> list[dict]:
    """Existing rows of `path` (a list, or {"rows": [...]}) with these replacing their keys."""
    # precision: the model benchmarks' rows; pairs and workers: the data benchmark's
    key = lambda r: tuple(r.get(k) for k in ("system", "task", "precision", "metric", "pairs", "workers"))
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    old = old.get("rows", []) if isinstance(old, dict) else old
    new = {key(r) for r in rows}
    return [r for r in old if key(r) not in new] + rows


def write_section(path: Path, start: str, end: str, section: str) -> None:
    """Replace the part of `path` between the markers `start` and `end` (or append it), keeping the rest.

    `section` carries its own markers, so a later run finds them again.
    """
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    write_text(path, text)
