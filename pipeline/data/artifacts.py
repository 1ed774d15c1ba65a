"""The data stages' records of what they wrote, as the stages after them read them back.

download writes data/raw/manifest.json, clean data/clean/stats.json and
binarize data/bin/meta.json. Each lists the train split's corpora in the order
their lines come, with a line count: the one thing every later stage needs from
them (clean's filter and bpe's sample share by corpus, binarize records the
counts, training draws by train.source_weights). `Corpus` is that listing, and
`train_corpora` the one way to read it from any of the three, checked against
the lines the split really has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import UserError

MANIFEST = "manifest.json"  # download's, in data/raw
CLEAN_STATS = "stats.json"  # clean's, in data/clean
BIN_META = "meta.json"  # binarize's, in data/bin
WHOLE = "train"  # the one corpus of a split whose record lists none


@dataclass(frozen=True)
class Corpus:
    """A train corpus and its lines in the split."""

    name: str
    lines: int

    def to_dict(self) -> dict[str, Any]:
        """As meta.json lists it."""
        return {"name": self.name, "sentences": self.lines}


def read_record(path: Path) -> dict[str, Any] | None:
    """A stage's JSON record, or None if there is none; a record that is not a JSON object is an error."""
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise UserError(f"{path}: not JSON ({e}); run the stage that writes it again") from e
    if not isinstance(found, dict):
        raise UserError(f"{path}: a JSON object was expected; run the stage that writes it again")
    return found


def manifest(raw_dir: Path) -> dict[str, Any]:
    """data/raw/manifest.json ({} without one: a raw directory of the user's own)."""
    return read_record(raw_dir / MANIFEST) or {}


def listed_corpora(record: Path) -> list[Corpus]:
    """The train corpora that a manifest.json, stats.json or meta.json lists ([] if it is missing)."""
    found = read_record(record)
    return _LISTINGS[record.name](found) if found is not None else []


def check_lines(record: Path, corpora: list[Corpus], n_lines: int, lines_file: Path, rerun: str) -> None:
    """Refuse a record whose corpora do not add up to the `n_lines` of `lines_file`; say to run `rerun`."""
    counted = sum(c.lines for c in corpora)
    if corpora and counted != n_lines:
        raise UserError(
            f"{record} counts {counted} training lines but {lines_file} has {n_lines}; run the {rerun} "
            "stage again"
        )


def train_corpora(record: Path, n_lines: int, lines_file: Path, rerun: str) -> list[Corpus]:
    """The corpora `record` lists, checked against the `n_lines` of `lines_file`; one corpus (WHOLE)
    when it lists none."""
    corpora = listed_corpora(record)
    check_lines(record, corpora, n_lines, lines_file, rerun)
    return corpora or [Corpus(WHOLE, n_lines)]


def _manifest_corpora(record: dict[str, Any]) -> list[Corpus]:
    train = (record.get("splits") or {}).get("train") or []
    return [Corpus(str(s["name"]), int(s["lines"])) for s in train]


def _stats_corpora(record: dict[str, Any]) -> list[Corpus]:
    corpora = (record.get("train") or {}).get("sources") or {}
    return [Corpus(str(name), int(s["lines_out"])) for name, s in corpora.items()]


def _meta_corpora(record: dict[str, Any]) -> list[Corpus]:
    return [Corpus(str(s["name"]), int(s["sentences"])) for s in record.get("sources") or []]


_LISTINGS = {MANIFEST: _manifest_corpora, CLEAN_STATS: _stats_corpora, BIN_META: _meta_corpora}
