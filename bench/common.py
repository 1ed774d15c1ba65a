"""What the benchmark scripts share: one reports/bench.json of rows, one reports/bench.md of sections."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.files import write_text


def merge_rows(path: Path, rows: list[dict]) -> list[dict]:
    """Existing rows of `path` (a list, or {"rows": [...]}) with these replacing their keys."""
    key = lambda r: (r["system"], r["task"], r["precision"], r["metric"])
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
