"""Held-out splits: val and test sets drawn from the train split when a split lists none.

Which lines go (HELDOUT_METHOD) depends only on the train split's length and
data.heldout_seed, and every split keeps corpus order; the train split is read
a chunk at a time in a second pass, so memory stays flat.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
from pathlib import Path
from typing import Any

from pipeline import files
from pipeline.data.artifacts import CorpusRecord
from pipeline.errors import UserError
from pipeline.files import SIDES, PairedWriter
from pipeline.params import DataParams

HELDOUT = "heldout"  # the name of a split held out of train


HELDOUT_METHOD = (
    "training line i gets key r_i = the i-th draw of random.Random(seed).random(); the heldout_val "
    "lines with the smallest keys are val, the heldout_test lines with the next smallest are test; "
    "every split keeps corpus order"
)
# With train sources of several pairs, only those of data.src_lang -> data.tgt_lang give held-out lines
# (the pair a multilingual model is selected and tested on), numbered among themselves: the same lines
# as a run on that pair's sources alone, wherever the other pairs' sources are listed.
HELDOUT_PAIR = (
    "; only the lines of the train sources of data.src_lang -> data.tgt_lang are drawn, i counting them alone"
)


def heldout_indices(
    n_lines: int, n_val: int, n_test: int, seed: int, eligible: list[tuple[int, int]] | None = None
) -> tuple[list[int], list[int]]:
    """Line numbers (0-based, sorted) held out for val and test, by the method in HELDOUT_METHOD,
    among the lines of the `eligible` ranges [start, end) (None: all).

    heapq.nsmallest is sorted()[:k], ties in line order as a stable sort gives them, in memory O(k).
    """
    rng = random.Random(seed)
    lines = range(n_lines) if eligible is None else itertools.chain.from_iterable(range(*r) for r in eligible)
    keyed = ((rng.random(), i) for i in lines)
    ranked = [i for _, i in heapq.nsmallest(n_val + n_test, keyed)]
    return sorted(ranked[:n_val]), sorted(ranked[n_val : n_val + n_test])


def hold_out(
    data: DataParams, sizes: dict[str, int], train: Path, train_records: list[CorpusRecord], out: Path
) -> dict[str, Any]:
    """Split `sizes` lines for val and/or test off the train split at TRAIN.{src,tgt} into `out`.

    Writes out/train, and out/val or out/test/heldout; each train source's record gets its lines
    after the split. Returns the manifest's `heldout` entry.
    """
    missing = [split for split, n in sizes.items() if n]
    n_train, held = sum(r["lines"] for r in train_records), sum(sizes.values())
    eligible = _main_pair(train_records, data)
    n_eligible = n_train if eligible is None else sum(b - a for a, b in eligible)
    if n_eligible - held < held:
        of_pair = (
            ""
            if eligible is None
            else f" of {data.src_lang}-{data.tgt_lang} (the pair held-out lines come from)"
        )
        parts = " + ".join(f"{sizes[s]} (data.heldout_{s})" for s in missing)
        keys = " / ".join(f"data.heldout_{s}" for s in missing)
        raise UserError(
            f"train has {n_eligible} lines{of_pair}, too few to hold out {parts} = {held} and keep at least "
            f"as many for training (needs {2 * held}); lower {keys}, or list sets in data.{missing[0]}"
        )
    val_idx, test_idx = heldout_indices(n_train, sizes["val"], sizes["test"], data.heldout_seed, eligible)
    where = {**dict.fromkeys(val_idx, "val"), **dict.fromkeys(test_idx, "test")}
    writers = {"train": PairedWriter(out / "train")}
    writers.update({s: PairedWriter(out / ("val" if s == "val" else f"test/{HELDOUT}")) for s in missing})
    try:
        for side in SIDES:
            _split_side(Path(f"{train}.{side}"), side, where, writers)
    finally:
        for writer in writers.values():
            writer.close()
    ends = list(itertools.accumulate(r["lines"] for r in train_records))
    drawn = {split: [0] * len(train_records) for split in missing}  # per held split, lines of each source
    for i in sorted(where):
        k = bisect.bisect_right(ends, i)
        train_records[k]["lines"] -= 1
        drawn[where[i]][k] += 1
    sized = {split: sizes[split] for split in missing}
    method = HELDOUT_METHOD if eligible is None else HELDOUT_METHOD + HELDOUT_PAIR
    heldout = {"splits": missing, "seed": data.heldout_seed, **sized, "method": method}
    if any(r.get("tokenized") for r in train_records):
        heldout["parts"] = {split: _parts(train_records, n) for split, n in drawn.items()}
    return heldout


def _main_pair(train_records: list[CorpusRecord], data: DataParams) -> list[tuple[int, int]] | None:
    """The line ranges of the train sources of data.src_lang -> data.tgt_lang, where sources of other
    pairs are among them (download records a source's pair then); None: every line."""
    pairs = [(r.get("src_lang", data.src_lang), r.get("tgt_lang", data.tgt_lang)) for r in train_records]
    main = (data.src_lang, data.tgt_lang)
    if all(pair == main for pair in pairs):
        return None
    starts = [0, *itertools.accumulate(r["lines"] for r in train_records)]
    return [(starts[k], starts[k + 1]) for k, pair in enumerate(pairs) if pair == main]


def _parts(train_records: list[CorpusRecord], drawn: list[int]) -> list[dict[str, Any]]:
    """A held split's runs of lines by train source: it keeps corpus order, so each source's are in a row."""
    return [
        {"name": r["name"], "lines": n, "tokenized": r.get("tokenized")}
        for r, n in zip(train_records, drawn)
        if n
    ]


def _split_side(path: Path, side: str, where: dict[int, str], writers: dict[str, PairedWriter]) -> None:
    """Copy one side of the train split, line i to writers[where[i]] (train if i is not held out)."""
    taken = sorted(where)
    start = 0  # the chunk's first line number
    for lines in files.line_chunks(path):
        end = start + len(lines)
        kept, at = [], start
        for i in taken[bisect.bisect_left(taken, start) : bisect.bisect_left(taken, end)]:
            kept += lines[at - start : i - start]
            writers[where[i]].write_lines(side, [lines[i - start]])
            at = i + 1
        writers["train"].write_lines(side, kept + lines[at - start :])
        start = end


def heldout_record(lines: int, parts: list[dict[str, Any]] | None) -> CorpusRecord:
    """`parts`: the train sources its lines came from, in order (only where one is tokenized)."""
    record: CorpusRecord = {
        "name": HELDOUT,
        "catalog": False,
        "lines": lines,
        "heldout_from": "train",
        "files": [],
    }
    if parts is not None:
        record["parts"] = parts
    return record
