"""Stage `clean`: normalize every line of every split; filter training pairs only.

Normalization is pipeline.data.text.normalize. Filtering (training pairs only),
by the first rule that applies: empty, too_long (more than clean.max_words
words), ratio (character-length ratio over clean.max_ratio), heldout_overlap
(clean.decontaminate: the source or target, normalized, is a line of a val or
test set), duplicate (clean.dedupe: the same pair as an earlier kept one). Val
and test sets are never filtered, so scores stay comparable with published ones.

stats.json: train, val, and test by set name, each with lines_in, lines_out,
dropped per reason, and per side the lines each normalization step changed;
train also per source (names and sizes from data/raw/manifest.json).
"""

from __future__ import annotations

import itertools
import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from pipeline import files
from pipeline.data.text import SideStats, drop_reason, normalize_lines
from pipeline.errors import UserError
from pipeline.params import CleanParams
from pipeline.stages.options import load_params, params_option

SIDES = ("src", "tgt")
DROP_REASONS = ("empty", "heldout_overlap", "too_long", "ratio", "duplicate")


@dataclass
class SplitStats:
    lines_in: int = 0
    lines_out: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    normalized: dict[str, SideStats] = field(default_factory=lambda: {s: SideStats() for s in SIDES})
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # train only: per source

    def to_dict(self) -> dict[str, Any]:
        out = {
            "lines_in": self.lines_in,
            "lines_out": self.lines_out,
            "dropped": dict(self.dropped),
            "normalized": {side: vars(s).copy() for side, s in self.normalized.items()},
        }
        return {**out, "sources": self.sources} if self.sources else out


@dataclass(frozen=True)
class Heldout:
    """The normalized sources and targets of every val and test set: no training pair may repeat one."""

    src: frozenset[str]
    tgt: frozenset[str]

    def overlaps(self, src: str, tgt: str) -> bool:
        return src in self.src or tgt in self.tgt


NO_HELDOUT = Heldout(frozenset(), frozenset())


def clean_pairs(
    src: Sequence[str],
    tgt: Sequence[str],
    params: CleanParams,
    train: bool,
    heldout: Heldout = NO_HELDOUT,
    sources: Sequence[tuple[str, int]] = (),
) -> tuple[list[str], list[str], SplitStats]:
    """Normalize a split's line-aligned sides; for train also filter. Returns (src, tgt, stats).

    `sources`: the train split's (name, lines) in order, for per-source counts.
    """
    if len(src) != len(tgt):
        raise ValueError(f"sides differ in length: {len(src)} != {len(tgt)}")  # callers check first
    stats = SplitStats(lines_in=len(src))
    src = normalize_lines(src, stats.normalized["src"])
    tgt = normalize_lines(tgt, stats.normalized["tgt"])
    if train:
        src, tgt = _filter(src, tgt, params, heldout, sources or [("train", len(src))], stats)
    stats.lines_out = len(src)
    return src, tgt, stats


def _filter(
    src: list[str],
    tgt: list[str],
    params: CleanParams,
    heldout: Heldout,
    sources: Sequence[tuple[str, int]],
    stats: SplitStats,
) -> tuple[list[str], list[str]]:
    if sum(n for _, n in sources) != len(src):
        raise ValueError(f"sources hold {sum(n for _, n in sources)} lines, the split {len(src)}")
    kept_src, kept_tgt, seen = [], [], set()
    pairs = zip(src, tgt)
    for name, n_lines in sources:
        counts = stats.sources.setdefault(
            name, {"lines_in": 0, "lines_out": 0, "dropped": dict.fromkeys(DROP_REASONS, 0)}
        )
        counts["lines_in"] += n_lines
        for s, t in itertools.islice(pairs, n_lines):
            reason = drop_reason(s, t, params)
            if reason is None and params.decontaminate and heldout.overlaps(s, t):
                reason = "heldout_overlap"
            if reason is None and params.dedupe:
                reason = "duplicate" if (s, t) in seen else None
                seen.add((s, t))
            if reason is not None:
                stats.dropped[reason] += 1
                counts["dropped"][reason] += 1
                continue
            counts["lines_out"] += 1
            kept_src.append(s)
            kept_tgt.append(t)
    return kept_src, kept_tgt


def clean(params: CleanParams, raw: Path, out: Path) -> dict[str, Any]:
    """Clean raw/{train,val}.{src,tgt} and raw/test/*.{src,tgt} into `out` (atomically) with stats.json."""
    raw = Path(raw)
    train_src, train_tgt = _read_pair(raw, "train")
    evals = {
        "val": _read_pair(raw, "val"),
        **{f"test/{n}": _read_pair(raw, f"test/{n}") for n in _test_names(raw)},
    }
    cleaned: dict[str, tuple[list[str], list[str]]] = {}
    by_split: dict[str, Any] = {"test": {}}
    for stem, (src, tgt) in evals.items():
        s, t, split_stats = clean_pairs(src, tgt, params, train=False)
        cleaned[stem] = (s, t)
        if stem == "val":
            by_split["val"] = split_stats.to_dict()
        else:
            by_split["test"][stem.removeprefix("test/")] = split_stats.to_dict()
    heldout = Heldout(
        frozenset(line for s, _ in cleaned.values() for line in s if line),
        frozenset(line for _, t in cleaned.values() for line in t if line),
    )
    sources = _train_sources(raw, len(train_src))
    s, t, train_stats = clean_pairs(train_src, train_tgt, params, True, heldout, sources)
    cleaned["train"], by_split["train"] = (s, t), train_stats.to_dict()
    if not cleaned["train"][0]:
        dropped = ", ".join(f"{k} {v}" for k, v in by_split["train"]["dropped"].items())
        raise UserError(
            f"clean dropped all {by_split['train']['lines_in']} training pairs ({dropped}); "
            "raise clean.max_words or clean.max_ratio, or check the corpus"
        )
    # unicode_version: NFC and the categories depend on it
    stats = {
        "train": by_split["train"],
        "val": by_split["val"],
        "test": by_split["test"],
        "unicode_version": unicodedata.unidata_version,
    }
    with files.atomic_path(out) as tmp:
        (tmp / "test").mkdir(parents=True)
        for stem, sides in cleaned.items():
            for side, lines in zip(SIDES, sides):
                files.write_lines(tmp / f"{stem}.{side}", lines)
        files.write_json(tmp / "stats.json", stats)
    return stats


def _test_names(raw: Path) -> list[str]:
    names = sorted(p.name.removesuffix(".src") for p in (raw / "test").glob("*.src"))
    if not names:
        raise UserError(f"{raw}/test/: no test set (<name>.src and <name>.tgt); run the download stage first")
    return names


def _train_sources(raw: Path, n_lines: int) -> list[tuple[str, int]]:
    """The train split's sources and line counts, from the download manifest (one source without one)."""
    manifest = raw / "manifest.json"
    if not manifest.is_file():
        return [("train", n_lines)]
    sources = [
        (s["name"], s["lines"]) for s in json.loads(manifest.read_text(encoding="utf-8"))["splits"]["train"]
    ]
    if sum(n for _, n in sources) != n_lines:
        raise UserError(
            f"{manifest} counts {sum(n for _, n in sources)} training lines but {raw}/train.src has "
            f"{n_lines}; "
            "run the download stage again"
        )
    return sources


def _read_pair(raw: Path, stem: str) -> tuple[list[str], list[str]]:
    src, tgt = (_read(raw / f"{stem}.{side}") for side in SIDES)
    if len(src) != len(tgt):
        raise UserError(
            f"{raw}/{stem}.src has {len(src)} lines but {raw}/{stem}.tgt has {len(tgt)}; "
            "run the download stage again"
        )
    return src, tgt


def _read(path: Path) -> list[str]:
    try:
        return files.read_lines(path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; run the download stage first") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 ({e.reason}); run the download stage again") from e


@click.command("clean")
@params_option
@click.option(
    "--raw",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/raw",
    show_default=True,
    help="The download stage's output.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/clean",
    show_default=True,
    help="Output directory: {train,val}.{src,tgt}, test/<name>.{src,tgt} and stats.json.",
)
def command(params_file: Path, raw: Path, out: Path) -> None:
    """Normalize the corpus in RAW and filter its training pairs into OUT."""
    stats = clean(load_params(params_file).clean, raw, out)
    train = stats["train"]
    click.echo(f"wrote {out}: train {train['lines_out']} of {train['lines_in']} pairs kept")
