"""Undoing the tokenization a corpus ships with, so that it reads as the raw text the pipeline expects.

A source whose files are Moses-tokenized (`tokenized: moses` in data.sources or
the catalog; MLQE-PE is) has `don 't`, ` , ` and XML entities (`&quot;`) in its
lines. Trained on as they are, the model would learn to write them, and its
hypotheses would be scored against untokenized references with spaces that are
not there. `clean` detokenizes such lines first, before normalization.

Entities are unescaped with `html.unescape` once, before sacremoses' detokenizer
runs with its own unescaping off: that covers Moses' escapes (`&amp;`, `&#124;`,
`&apos;`...) and any other HTML entity a corpus has, and unescaping only once keeps
a literal `&amp;quot;` as `&quot;`, as the tokenizer's input had it.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Sequence

from sacremoses import MosesDetokenizer

TOKENIZERS = ("moses",)


@functools.cache
def _moses(lang: str) -> MosesDetokenizer:
    return MosesDetokenizer(lang=lang)


def detokenize(line: str, lang: str) -> str:
    """One Moses-tokenized line as untokenized text (`lang`: ISO 639-1, sacremoses' language rules)."""
    tokens = html.unescape(line).split()
    return _moses(lang).detokenize(tokens, unescape=False) if tokens else ""


def detokenize_lines(lines: Sequence[str], lang: str) -> tuple[list[str], int]:
    """Every line detokenized, and how many of them that changed."""
    out = [detokenize(line, lang) for line in lines]
    return out, sum(a != b for a, b in zip(out, lines))
