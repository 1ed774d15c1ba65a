"""Text normalization and the training-pair filter rules, applied by `clean` and to user input.

Normalization (`normalize`), in order:
1. Control and format characters: a whitespace control (tab, CR, U+001C-U+001F,
   U+0085, ...) becomes a space; other controls (Cc) and format characters (Cf)
   are deleted, except ZWNJ and ZWJ, which are spelling in Persian, Indic
   scripts and emoji. Deleting comes before NFC, so that a deleted character
   cannot keep a letter and its combining mark from composing.
2. Unicode NFC.
3. Every run of whitespace (str.split(), NBSP included) becomes one space; both
   ends are stripped.
`normalize` is idempotent.
"""

from __future__ import annotations

import functools
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.params import CleanParams

_KEEP_CF = {0x200C, 0x200D}  # ZWNJ, ZWJ


@functools.cache
def _control_table() -> dict[int, str | None]:
    """str.translate table for step 1: whitespace Cc -> space, other Cc and Cf -> deleted."""
    table: dict[int, str | None] = {}
    for code in range(sys.maxunicode + 1):  # every code point, once per process (docs/cpu-speed.md)
        category = unicodedata.category(chr(code))
        if category == "Cc":
            table[code] = " " if chr(code).isspace() else None
        elif category == "Cf" and code not in _KEEP_CF:
            table[code] = None
    return table


def _steps(line: str) -> tuple[str, str, str]:
    """The line after steps 1, 2 and 3 of the normalization."""
    # Every Cc and Cf character is non-printable (a test checks the table), so a printable line,
    # as most are, has nothing to translate: the check costs about a twentieth of translate.
    no_controls = line if line.isprintable() else line.translate(_control_table())
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
