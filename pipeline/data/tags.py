"""Target-language tags: one model translating into several languages, told which by a tag.

As in Google's multilingual NMT (Johnson et al. 2017) and OPUS-MT's multi-target models, every
source sentence starts with a token naming the language wanted, `<2ms>` or `<2id>`. Tags are on
when the train sources translate into more than one language (data.sources.NAME.tgt_lang), or the
parent model (train.init_from) has tags, which its child keeps, for one target too; then
download writes each source line as "<2xx> text", every split alike, and the tag stays in the text
from there on: held-out lines keep the tag of the source they came from, clean filters and
decontaminates the text after it, bpe makes each tag one piece (a user-defined symbol), and
`translate --tgt-lang` adds it to lines that lack one.

Back-translated sources carry one more tag after it, BT_TAG (Caswell et al. 2019: the model learns
to tell synthetic sources apart, so their noise does not pass for real data); bpe makes it a piece
the same way, and a real source never has it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pipeline.errors import UserError

BT_TAG = "<BT>"
_TAGGED = re.compile(r"<2([A-Za-z0-9_-]+)> ?")


def tag(lang: str) -> str:
    """The tag that asks for `lang`: <2ms>."""
    return f"<2{lang}>"


def split_tag(line: str) -> tuple[str, str]:
    """("<2ms> ", "text") for "<2ms> text"; ("", line) for a line without a tag."""
    found = _TAGGED.match(line)
    return (found.group(0), line[found.end() :]) if found else ("", line)


def tag_of(line: str) -> str | None:
    """The language a line's tag asks for, or None."""
    found = _TAGGED.match(line)
    return found.group(1) if found else None


def split_tags(lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """Each line's tag (with its space; "" if none) and its text after it."""
    if not any(line.startswith("<2") for line in lines):
        return [""] * len(lines), list(lines)
    pairs = [split_tag(line) for line in lines]
    return [t for t, _ in pairs], [text for _, text in pairs]


def tagged_lines(lines: Iterable[str], lang: str) -> list[str]:
    """The lines, each behind `lang`'s tag."""
    prefix = tag(lang) + " "
    return [prefix + line for line in lines]


def tags_in(pieces: Iterable[str]) -> dict[str, str]:
    """Language -> tag, of the tags among a vocabulary's pieces."""
    out = {}
    for piece in pieces:
        found = _TAGGED.fullmatch(piece)
        if found:
            out[found.group(1)] = piece
    return out


def synthetic_prefix(tags: Sequence[str], tgt_lang: str, bt_tag: bool) -> str:
    """What a back-translated source begins with: `tgt_lang`'s tag where the sources carry
    target-language tags (`tags`, download's), then BT_TAG if `bt_tag`. A tag the vocabulary will
    not have (no train source into `tgt_lang`) is a UserError."""
    lead = [tag(tgt_lang)] if tags else []
    if lead and lead[0] not in tags:
        raise UserError(
            f"back-translation: the train sources' target-language tags are {', '.join(tags)}, and "
            f"data.tgt_lang ({tgt_lang}) has none; the synthetic pairs would carry a tag the "
            "vocabulary lacks: add a train source into it"
        )
    return "".join(f"{p} " for p in [*lead, *([BT_TAG] if bt_tag else [])])
