"""Monolingual target-language text for back-translation (backtranslation.mono).

Each source is a catalog set or a data.sources entry, read by the download stage's Reader (so
archives, formats, checksums and the mirror work as for bitext), of which the side in
data.tgt_lang is kept. The lines are normalized as clean normalizes, empty ones and those over
clean.max_words dropped, duplicates dropped, and with backtranslation.max_lines a seeded sample
kept, in corpus order. Decontamination against val and test comes later, in the clean stage,
where the synthetic pairs go through every rule that real ones do.
"""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import files
from pipeline.data import detok
from pipeline.data.fetch import Mirror
from pipeline.data.planning import plan_monolingual
from pipeline.data.reading import Reader
from pipeline.data.text import normalize
from pipeline.params import Params


@dataclass
class MonoText:
    lines: list[str]
    stats: dict[str, Any]  # per source: lines read, kept; and the total before and after the sample


def read_mono(params: Params, mirror: Mirror | None, scratch: Path) -> MonoText:
    """backtranslation.mono's text in data.tgt_lang, normalized, deduplicated and sampled."""
    bt, data = params.backtranslation, params.data
    # every name is resolved (and refused) before anything is fetched
    plans = [plan_monolingual(name, f"backtranslation.mono[{i}]", data) for i, name in enumerate(bt.mono)]
    reader = Reader(scratch, mirror)
    seen: set[str] = set()
    lines: list[str] = []
    sources: dict[str, dict[str, int]] = {}
    for plan, side in plans:
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            stem = Path(tmp) / "pairs"
            reader.copy_split([plan], stem)
            text = files.read_lines(f"{stem}.{side}")
        if plan.tokenized:
            text, _ = detok.detokenize_lines(text, data.tgt_lang)
        kept = 0
        for line in map(normalize, text):
            if line and len(line.split()) <= params.clean.max_words and line not in seen:
                seen.add(line)
                lines.append(line)
                kept += 1
        sources[plan.name] = {"lines_in": len(text), "lines_out": kept}
    total = len(lines)
    if bt.max_lines is not None and total > bt.max_lines:
        chosen = sorted(random.Random(bt.seed).sample(range(total), bt.max_lines))
        lines = [lines[i] for i in chosen]
    return MonoText(lines, {"sources": sources, "lines": total, "sampled": len(lines)})
