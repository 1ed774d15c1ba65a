"""Stage `clean`: normalize every line of every split; filter training pairs only.

Normalization is pipeline.data.text.normalize. Filtering (training pairs only),
by the first rule that applies: empty, too_long (more than clean.max_words
words), ratio (character-length ratio over clean.max_ratio), duplicate
(clean.dedupe: the same pair as an earlier kept one). val and test are never
filtered: every line stays, so scores stay comparable with published ones.

stats.json, per split: lines_in, lines_out, dropped {empty, too_long, ratio,
duplicate} (all 0 for val and test), and per side the number of lines each
normalization step changed: control_chars, nfc, whitespace.
"""

from __future__ import annotations

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

SPLITS = ("train", "val", "test")
SIDES = ("src", "tgt")
DROP_REASONS = ("empty", "too_long", "ratio", "duplicate")


@dataclass
class SplitStats:
    lines_in: int = 0
    lines_out: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    normalized: dict[str, SideStats] = field(default_factory=lambda: {s: SideStats() for s in SIDES})

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines_in": self.lines_in,
            "lines_out": self.lines_out,
            "dropped": dict(self.dropped),
            "normalized": {side: vars(s).copy() for side, s in self.normalized.items()},
        }


def clean_pairs(
    src: Sequence[str], tgt: Sequence[str], params: CleanParams, train: bool
) -> tuple[list[str], list[str], SplitStats]:
    """Normalize a split's line-aligned sides; for train also filter. Returns (src, tgt, stats)."""
    if len(src) != len(tgt):
        raise ValueError(f"sides differ in length: {len(src)} != {len(tgt)}")  # callers check first
    stats = SplitStats(lines_in=len(src))
    src = normalize_lines(src, stats.normalized["src"])
    tgt = normalize_lines(tgt, stats.normalized["tgt"])
    if train:
        src, tgt = _filter(src, tgt, params, stats.dropped)
    stats.lines_out = len(src)
    return src, tgt, stats


def _filter(
    src: list[str], tgt: list[str], params: CleanParams, dropped: dict[str, int]
) -> tuple[list[str], list[str]]:
    kept_src, kept_tgt, seen = [], [], set()
    for s, t in zip(src, tgt):
        reason = drop_reason(s, t, params)
        if reason is None and params.dedupe:
            reason = "duplicate" if (s, t) in seen else None
            seen.add((s, t))
        if reason is not None:
            dropped[reason] += 1
            continue
        kept_src.append(s)
        kept_tgt.append(t)
    return kept_src, kept_tgt


def clean(params: CleanParams, raw: Path, out: Path) -> dict[str, Any]:
    """Clean raw/{split}.{src,tgt} into `out` (atomically) with stats.json; return the stats."""
    cleaned: dict[str, tuple[list[str], list[str]]] = {}
    by_split: dict[str, dict[str, Any]] = {}
    for split in SPLITS:
        src, tgt = (_read(Path(raw) / f"{split}.{side}") for side in SIDES)
        if len(src) != len(tgt):
            raise UserError(
                f"{raw}/{split}.src has {len(src)} lines but {raw}/{split}.tgt has {len(tgt)}; "
                "run the download stage again"
            )
        s, t, split_stats = clean_pairs(src, tgt, params, train=split == "train")
        cleaned[split], by_split[split] = (s, t), split_stats.to_dict()
    if not cleaned["train"][0]:
        dropped = ", ".join(f"{k} {v}" for k, v in by_split["train"]["dropped"].items())
        raise UserError(
            f"clean dropped all {by_split['train']['lines_in']} training pairs ({dropped}); "
            "raise clean.max_words or clean.max_ratio, or check the corpus"
        )
    # unicode_version: NFC and the categories depend on it
    stats: dict[str, dict[str, Any] | str] = {**by_split, "unicode_version": unicodedata.unidata_version}
    with files.atomic_path(out) as tmp:
        tmp.mkdir()
        for split, sides in cleaned.items():
            for side, lines in zip(SIDES, sides):
                files.write_lines(tmp / f"{split}.{side}", lines)
        files.write_json(tmp / "stats.json", stats)
    return stats


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
    help="Output directory: {train,val,test}.{src,tgt} and stats.json.",
)
def command(params_file: Path, raw: Path, out: Path) -> None:
    """Normalize the corpus in RAW and filter its training pairs into OUT."""
    stats = clean(load_params(params_file).clean, raw, out)
    train = stats["train"]
    click.echo(f"wrote {out}: train {train['lines_out']} of {train['lines_in']} pairs kept")
