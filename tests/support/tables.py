"""References, garbled hypotheses and Markdown tables, as the report and experiments tests read them."""

from __future__ import annotations

import random

from tests.support.models import WORDS


def references(n: int, seed: int = 0) -> list[str]:
    """n made-up reference sentences of 6-14 WORDS (the same for the same n and seed)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) for _ in range(n)]


def garble(refs: list[str], share: float, seed: int = 1) -> list[str]:
    """Hypotheses: the references with about `share` of their words replaced by a word outside WORDS."""
    rng = random.Random(seed)
    return [" ".join("xyz" if rng.random() < share else w for w in r.split()) for r in refs]


def table_rows(text: str) -> list[list[str]]:
    """Cells of every Markdown table row in `text` (escaped pipes kept inside cells)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not set(line) <= set("|-: "):
            cells = line.replace("\\|", "\x00").strip("|").split("|")
            rows.append([c.strip().replace("\x00", "\\|") for c in cells])
    return rows
