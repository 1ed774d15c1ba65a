"""Stage `clean`: normalize every line; filter training pairs only.

Normalization (`normalize`, applied to every line of every split), in order:
1. Control and format characters. A control character (category Cc) that is
   whitespace to Python (tab, VT, FF, CR, U+001C-U+001F, U+0085) becomes a
   space, since it separates words; any other Cc (NUL, ESC, DEL, C1 controls)
   is deleted. Format characters (Cf: zero-width space, BOM, soft hyphen, bidi
   marks, ...) are deleted, except ZWNJ (U+200C) and ZWJ (U+200D), which are
   spelling in Persian and Indic scripts and in emoji sequences. Deleting comes
   before NFC so that a deleted character cannot keep a letter and its
   combining mark from composing.
2. Unicode NFC.
3. Every run of whitespace (str.split(): Unicode whitespace, NBSP included)
   becomes one space, and both ends are stripped.
`normalize` is idempotent.

Filtering (training pairs only), by the first rule that applies, in this order:
empty (either side is empty), too_long (either side has more than
clean.max_words space-separated words), ratio (longer side's characters over
the shorter's, the shorter counted as at least 1, exceeds clean.max_ratio),
duplicate (clean.dedupe: the same (src, tgt) pair as an earlier kept one).
val and test are normalized but never filtered: every line stays, an empty one
as an empty line, so scores stay comparable with published ones.

stats.json, per split: lines_in, lines_out, dropped {empty, too_long, ratio,
duplicate} (all 0 for val and test), and per side the number of lines that
normalization changed: control_chars (step 1 changed it), nfc (step 2),
whitespace (step 3).
"""

from __future__ import annotations

import functools
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import click

from pipeline import files
from pipeline.errors import UserError
from pipeline.params import CleanParams
from pipeline.stage import load_params, params_option

SPLITS = ("train", "val", "test")
SIDES = ("src", "tgt")
DROP_REASONS = ("empty", "too_long", "ratio", "duplicate")
_KEEP_CF = {0x200C, 0x200D}  # ZWNJ, ZWJ


@functools.cache
def _control_table() -> dict[int, str | None]:
    """str.translate table for step 1: whitespace Cc -> space, other Cc and Cf -> deleted."""
    table: dict[int, str | None] = {}
    for code in range(sys.maxunicode + 1):  # ~0.1 s, once per process
        category = unicodedata.category(chr(code))
        if category == "Cc":
            table[code] = " " if chr(code).isspace() else None
        elif category == "Cf" and code not in _KEEP_CF:
            table[code] = None
    return table


def _steps(line: str) -> tuple[str, str, str]:
    """The line after steps 1, 2 and 3 of the normalization."""
    no_controls = line.translate(_control_table())
    nfc = unicodedata.normalize("NFC", no_controls)
    return no_controls, nfc, " ".join(nfc.split())


def normalize(line: str) -> str:
    """One line, normalized as the module docstring says (also used on user input by translate)."""
    return _steps(line)[2]


@dataclass
class SideStats:
    """How many lines of one side each normalization step changed."""

    control_chars: int = 0
    nfc: int = 0
    whitespace: int = 0


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


def normalize_lines(lines: Sequence[str], stats: SideStats) -> list[str]:
    """Normalize every line, counting in `stats` the lines each step changed."""
    out = []
    for line in lines:
        no_controls, nfc, result = _steps(line)
        stats.control_chars += no_controls != line
        stats.nfc += nfc != no_controls
        stats.whitespace += result != nfc
        out.append(result)
    return out


def drop_reason(src: str, tgt: str, params: CleanParams) -> str | None:
    """Why a normalized training pair is dropped (empty, too_long, ratio), or None to keep it."""
    if not src or not tgt:
        return "empty"
    # Normalized text has single spaces and no others, so words = spaces + 1.
    if max(src.count(" "), tgt.count(" ")) + 1 > params.max_words:
        return "too_long"
    short, long = sorted((len(src), len(tgt)))
    if long / max(short, 1) > params.max_ratio:
        return "ratio"
    return None


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
    cleaned, stats = {}, {}
    for split in SPLITS:
        src, tgt = (_read(Path(raw) / f"{split}.{side}") for side in SIDES)
        if len(src) != len(tgt):
            raise UserError(
                f"{raw}/{split}.src has {len(src)} lines but {raw}/{split}.tgt has {len(tgt)}; "
                "run the download stage again"
            )
        s, t, split_stats = clean_pairs(src, tgt, params, train=split == "train")
        cleaned[split], stats[split] = (s, t), split_stats.to_dict()
    if not cleaned["train"][0]:
        dropped = ", ".join(f"{k} {v}" for k, v in stats["train"]["dropped"].items())
        raise UserError(
            f"clean dropped all {stats['train']['lines_in']} training pairs ({dropped}); "
            "raise clean.max_words or clean.max_ratio, or check the corpus"
        )
    stats["unicode_version"] = unicodedata.unidata_version  # NFC and categories depend on it
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
        raise UserError(f"{path}: no such file; run the download stage first")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 ({e.reason}); run the download stage again")


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
