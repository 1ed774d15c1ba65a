"""Held-out splits: which train lines become val and test (the stage's own tests, which write the
splits: tests/unit/stages/test_download.py)."""

from __future__ import annotations

import random
import tracemalloc

from pipeline.data import heldout


def test_heldout_indices_follow_the_documented_method():
    rng = random.Random(7)
    keys = [rng.random() for _ in range(30)]
    ranked = sorted(range(30), key=lambda i: keys[i])
    assert heldout.heldout_indices(30, 4, 5, 7) == (sorted(ranked[:4]), sorted(ranked[4:9]))


def test_heldout_indices_take_memory_for_the_held_out_lines_not_the_corpus():
    tracemalloc.start()
    heldout.heldout_indices(300_000, 5, 5, 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 100_000  # a key per line would be over 10 MB
