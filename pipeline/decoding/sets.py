"""Decoding a run's val set and test sets into one directory: val.hyp and test/<name>.hyp, one
line per source line, and stats.json, as the decode stage writes them and the score stage reads
them, with any backend (the torch Translator, CTranslate2's)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipeline import files
from pipeline.decoding.steps import SearchStats
from pipeline.decoding.translator import TextTranslator, nbest_row, one_line
from pipeline.errors import UserError

VAL = "val"
TEST_DIR = "test"  # clean/test/<name>.src -> test/<name>.hyp


def read_sources(clean_dir: Path) -> dict[str, list[str]]:
    """The sources by output path stem: "val", then "test/<name>" for each test set, sorted by name."""
    rerun = "run the clean stage first (`python -m pipeline clean`)"
    val, test_dir = clean_dir / f"{VAL}.src", clean_dir / TEST_DIR
    if not val.is_file():
        raise UserError(f"{val}: missing; {rerun}")
    tests = sorted(test_dir.glob("*.src")) if test_dir.is_dir() else []
    if not tests:
        raise UserError(f"{test_dir}: no test sets (<name>.src) in it; {rerun}")
    sources = {VAL: files.read_lines(val)}
    sources |= {f"{TEST_DIR}/{path.stem}": files.read_lines(path) for path in tests}
    return sources


def decode_split(
    translator: TextTranslator, lines: list[str], n_best: int, out_dir: Path, stem: str
) -> dict[str, Any]:
    """Write out_dir/{stem}.hyp (and .nbest); return the set's speed and truncation stats."""
    stats = SearchStats()
    start = time.perf_counter()
    nbest = translator.translate_nbest(lines, n_best, stats=stats)
    seconds = time.perf_counter() - start
    hyps = [one_line(n[0].text) for n in nbest]
    assert len(hyps) == len(lines), f"{stem}: {len(hyps)} hypotheses for {len(lines)} sources"
    files.write_lines(out_dir / f"{stem}.hyp", hyps)
    if n_best > 1:
        rows = [nbest_row(i, t) for i, ts in enumerate(nbest) for t in ts]
        files.write_lines(out_dir / f"{stem}.nbest", rows)
    return {
        "sentences": len(lines),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(lines) / max(seconds, 1e-9), 2),
        "tokens_per_s": round(stats.out_tokens / max(seconds, 1e-9), 2),
        "truncated": stats.truncated,
    }


def decode_sets(
    translator: TextTranslator,
    sources: dict[str, list[str]],
    n_best: int,
    out_dir: Path,
    report: dict[str, Any],
) -> dict[str, Any]:
    """Each set of `sources` (read_sources) translated into out_dir (atomically), its speed added to
    `report` (what stats.json says of the device and settings); -> stats.json."""
    with files.atomic_path(out_dir) as tmp:
        (tmp / TEST_DIR).mkdir(parents=True)
        for stem, lines in sources.items():
            stats = decode_split(translator, lines, n_best, tmp, stem)
            if stem == VAL:
                report[VAL] = stats
            else:
                report.setdefault(TEST_DIR, {})[stem.split("/", 1)[1]] = stats
        files.write_json(tmp / "stats.json", report)
    return report
