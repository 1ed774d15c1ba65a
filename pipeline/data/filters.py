"""Rules for web-crawled and mined pairs: each looks at one pair and names why it is noise, or passes it.

The kinds of noise web corpora carry (Khayrallah & Koehn 2018, "On the Impact of Various Types
of Noise on NMT"): untranslated copies (the most harmful), misaligned pairs, wrong-language
lines, fragments and boilerplate. OpusCleaner and mozilla/translations filter them with rules of
these kinds; the measured effect of each is in docs/cleaning.md. Misaligned pairs pass every
rule here: a model score finds them.

Each rule is a function of the normalized pair and its languages, so that a chunk of pairs can
be filtered in a worker process with no state but the settings.
"""

from __future__ import annotations

import functools
import itertools
import re
import typing
import unicodedata
from collections import Counter
from dataclasses import dataclass

from pipeline.params import FilterRule

# Why a pair is dropped, in the order the rules are tried (the first that applies counts)
REASONS = ("too_few_words", "boilerplate", "repeated", "untranslated", "numbers", "script", "wrong_language")
# The names clean.filters lists them by, in the same order; its last, score, is the model score's,
# which the clean stage applies to the pairs every other rule kept (pipeline/decoding/pair_scores.py)
RULES = typing.get_args(FilterRule)[:-1]

# Languages identified as one another's that a side may be: Malay and Indonesian share most of their
# words, and every detector measured confuses them (reports/langid.md).
SAME_LANGUAGE = {"ms": frozenset({"ms", "id"}), "id": frozenset({"ms", "id"})}
# The script of a language's letters, for the script rule; a language not here is not checked.
SCRIPTS = {
    **dict.fromkeys(("ru", "uk", "bg", "be", "sr", "mk", "kk", "ky", "mn", "tg"), "CYRILLIC"),
    **dict.fromkeys(("ar", "fa", "ur", "ps"), "ARABIC"),
    **dict.fromkeys(("zh", "ja"), "CJK"),
    **dict.fromkeys(("hi", "mr", "ne"), "DEVANAGARI"),
    "el": "GREEK",
    "he": "HEBREW",
    "ko": "HANGUL",
    "th": "THAI",
    "ka": "GEORGIAN",
    "hy": "ARMENIAN",
    **dict.fromkeys(
        "en de fr es it pt nl cs pl sk sl hr ro hu fi et lv lt sv da nb is ga cy tr az uz ms id vi".split(),
        "LATIN",
    ),
}
_URL = re.compile(r"(?:https?://|www\.)\S+|\S+@\S+\.\w{2,}", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Rules:
    """Which rules run, and their thresholds (clean.* in params.yaml)."""

    min_words: int = 0  # each side has at least this many words; 0: off
    boilerplate: bool = False  # a URL or e-mail address in one side only, or a side of markup
    repeated: bool = False  # one token makes up most of a side of several
    untranslated: bool = False  # the target is the source (letters compared, case and punctuation aside)
    numbers: bool = False  # the numbers of the two sides differ
    min_script_ratio: float = 0.0  # share of a side's letters in its language's script; 0: off
    langid: bool = False  # each side is identified as its language

    @property
    def any(self) -> bool:
        return bool(
            self.min_words or self.boilerplate or self.repeated or self.untranslated or self.numbers
        ) or bool(self.min_script_ratio or self.langid)


OFF = Rules()


def noise_reason(src: str, tgt: str, langs: tuple[str, str], rules: Rules) -> str | None:
    """The first of REASONS that applies to the pair (normalized, non-empty), or None."""
    if rules.min_words and min(len(src.split()), len(tgt.split())) < rules.min_words:
        return "too_few_words"
    if rules.boilerplate and (_has_url(src) != _has_url(tgt) or _markup(src) or _markup(tgt)):
        return "boilerplate"
    if rules.repeated and (_repeats(src) or _repeats(tgt)):
        return "repeated"
    if rules.untranslated and _letters(src) == _letters(tgt):
        return "untranslated"
    if rules.numbers and _numbers(src) != _numbers(tgt):
        return "numbers"
    if rules.min_script_ratio and any(
        script_ratio(text, lang) < rules.min_script_ratio for text, lang in zip((src, tgt), langs)
    ):
        return "script"
    if rules.langid and any(not is_language(text, lang) for text, lang in zip((src, tgt), langs)):
        return "wrong_language"
    return None


def _has_url(text: str) -> bool:
    return _URL.search(text) is not None


def _markup(text: str) -> bool:
    """A side that is mostly markup: more <, >, {, }, | and = than one in ten characters."""
    return sum(text.count(c) for c in "<>{}|=") * 10 > len(text)


def _repeats(text: str) -> bool:
    """One token is over half of a side of at least 6 tokens, or a token 4 times in a row."""
    tokens = text.lower().split()
    if len(tokens) >= 6 and Counter(tokens).most_common(1)[0][1] * 2 > len(tokens):
        return True
    run = 1
    for a, b in itertools.pairwise(tokens):
        run = run + 1 if a == b else 1
        if run >= 4:
            return True
    return False


def _letters(text: str) -> str:
    return "".join(c for c in text.casefold() if c.isalnum())


def _numbers(text: str) -> Counter[str]:
    """Digit runs, without leading zeros: 1,000 and 1.000 both give 1 and 000 -> 1, 0."""
    return Counter(d.lstrip("0") or "0" for d in _DIGITS.findall(text))


def script_ratio(text: str, lang: str) -> float:
    """Share of the side's letters in its language's script (1.0 for a language SCRIPTS lacks, or a
    side without letters)."""
    script = SCRIPTS.get(lang.split("-")[0].lower())
    letters = [c for c in text if c.isalpha()]
    if script is None or not letters:
        return 1.0
    return sum(_script(c) == script for c in letters) / len(letters)


@functools.lru_cache(maxsize=4096)
def _script(char: str) -> str:
    name = unicodedata.name(char, "")
    if name.startswith(("CJK", "HIRAGANA", "KATAKANA")):
        return "CJK"
    return name.split(" ", 1)[0]


def is_language(text: str, lang: str) -> bool:
    """Whether the identifier takes `text` for `lang` (or a language SAME_LANGUAGE accepts for it)."""
    found = identify(text)
    return found in SAME_LANGUAGE.get(lang, {lang})


def identify(text: str) -> str:
    """The ISO 639-1 code py3langid gives `text` (its model ships in its wheel: reports/langid.md)."""
    return str(_identifier().classify(text)[0])


@functools.cache
def _identifier() -> typing.Any:
    """py3langid's identifier, its feature table widened from float16 to float32 once: numpy has
    no fast float16 product, so each line paid for casting its rows, more than for the product.
    The scores come out bit for bit the same: numpy cast them to float32 before multiplying."""
    import numpy as np
    from py3langid.langid import LanguageIdentifier, _load_identifier

    identifier: LanguageIdentifier = _load_identifier()
    identifier.nb_ptc = np.asarray(identifier.nb_ptc, dtype=np.float32)
    return identifier
