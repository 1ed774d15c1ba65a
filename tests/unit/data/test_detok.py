"""Moses detokenization of corpora that ship tokenized: MLQE-PE's quirks come out as plain text."""

from __future__ import annotations

import pytest

from pipeline.data.detok import detokenize, detokenize_lines

# (tokenized as MLQE-PE ships it, the text it was tokenized from)
ROUND_TRIPS = [
    (
        "Who would have known if he hadn 't said it himself .",
        "Who would have known if he hadn't said it himself.",
    ),
    (
        "The hand that puts the cross , also sharpens the knife .",
        "The hand that puts the cross, also sharpens the knife.",
    ),
    (
        "Don 't talk about the kernel before you crack open the nut .",
        "Don't talk about the kernel before you crack open the nut.",
    ),
    ("He said &quot; no &quot; , and left .", 'He said "no", and left.'),
    ("Tom &amp; Jerry &#124; &lt;b&gt; it &apos;s", "Tom & Jerry | <b> it's"),
    ("( see the r / PikabuPolitics post ) ?", "(see the r / PikabuPolitics post)?"),
]


@pytest.mark.parametrize(("tokenized", "text"), ROUND_TRIPS)
def test_mlqe_pe_quirks_round_trip_to_the_untokenized_text(tokenized, text):
    assert detokenize(tokenized, "en") == text


def test_russian_punctuation_is_reattached():
    line = "Кто бы и знал , коли б не сам сказал ."
    assert detokenize(line, "ru") == "Кто бы и знал, коли б не сам сказал."
    assert detokenize('На заявлении " Вадима Соколова " о выдаче визы :', "ru") == (
        'На заявлении "Вадима Соколова" о выдаче визы:'
    )


def test_entities_are_unescaped_once_so_an_escaped_entity_stays_literal():
    # The tokenizer escaped "&quot;" (literal text) as "&amp;quot;": one unescape gives it back.
    assert detokenize("write &amp;quot; in HTML", "en") == "write &quot; in HTML"
    assert detokenize("a&nbsp;b &eacute;t&eacute;", "fr") == "a b été"  # any HTML entity, not only Moses'


def test_lines_that_change_are_counted_and_empty_lines_stay_empty():
    lines, changed = detokenize_lines(["It 's fine .", "Already plain.", ""], "en")
    assert lines == ["It's fine.", "Already plain.", ""]
    assert changed == 1
