"""Text normalization (each rule, idempotence, what each step counts) and the training-pair drop rules."""

from __future__ import annotations

import dataclasses
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.data import text
from tests.support.repo import BASE

CLEAN = dataclasses.replace(BASE.clean, max_words=5, max_ratio=3.0)


# --- normalize ------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, expected",
    [
        ("Cafe\u0301", "Café"),  # NFC composes
        ("\u212b", "\u00c5"),  # ANGSTROM SIGN is canonically Å
        ("ﬁ ①", "ﬁ ①"),  # but compatibility characters stay (NFC, not NFKC)
        ("a\tb", "a b"),  # whitespace controls separate words
        ("a\x0bb\x0cc\rd\x1ce\x85f", "a b c d e f"),
        ("a\x00b\x07c\x1bd\x7fe\x9bf", "abcdef"),  # other controls are deleted
        ("\ufeffa\u200bb\u00adc\u200ed\u2066e\u2069", "abcde"),  # BOM, ZWSP, soft hyphen, bidi marks
        ("\u0645\u06cc\u200c\u0634\u0648\u062f", "\u0645\u06cc\u200c\u0634\u0648\u062f"),  # ZWNJ is spelling
        ("👩\u200d💻", "👩\u200d💻"),  # ZWJ joins an emoji sequence
        ("e\u200b\u0301", "\u00e9"),  # deleting first lets NFC compose across a deleted character
        ("  a \u00a0\u3000 b\u2028c  ", "a b c"),  # Unicode whitespace collapses; ends are stripped
        ("\t \u200b ", ""),
    ],
)
def test_normalize_rules(line, expected):
    assert text.normalize(line) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_normalize_output_is_clean_and_stable(line):
    out = text.normalize(line)
    assert text.normalize(out) == out
    assert unicodedata.is_normalized("NFC", out)
    assert out == out.strip() and "  " not in out
    assert not any(c.isspace() and c != " " for c in out)
    assert not any(unicodedata.category(c) == "Cc" for c in out)
    assert not any(unicodedata.category(c) == "Cf" for c in out if c not in "\u200c\u200d")


def test_a_printable_line_has_no_character_that_step_1_changes():
    # _steps skips the translate table for printable lines: that is exact only if every code point
    # the table changes is non-printable, on this Python's Unicode version.
    assert not [hex(c) for c in text._control_table() if chr(c).isprintable()]


def test_normalization_changes_are_counted_per_step():
    src = ["a\tb", "e\u0301", "a  b", "ok", "\u200bx  y\u0301"]
    stats = text.SideStats()
    assert text.normalize_lines(src, stats) == ["a b", "\u00e9", "a b", "ok", "x \u00fd"]
    assert stats == text.SideStats(control_chars=2, nfc=2, whitespace=2)


# --- drop_reason ----------------------------------------------------------------


def test_empty_side_does_not_divide_by_zero_in_the_ratio():
    assert text.drop_reason("abc", "", CLEAN) == "empty"
    assert text.drop_reason("ab", "a", dataclasses.replace(CLEAN, max_ratio=2.0)) is None
