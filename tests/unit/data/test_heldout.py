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


def test_only_lines_of_the_main_pair_are_held_out_and_they_stay_the_same_lines():
    eligible = [(0, 20), (35, 40)]  # e.g. en-ms sources around an en-id one
    inside = [i for i in range(50) if i < 20 or 35 <= i < 40]
    rng = random.Random(7)
    keys = {i: rng.random() for i in inside}  # the k-th line of the pair gets the k-th draw
    ranked = sorted(inside, key=lambda i: keys[i])
    assert heldout.heldout_indices(50, 4, 3, 7, eligible) == (sorted(ranked[:4]), sorted(ranked[4:7]))
    # the same lines as a one-pair train split of those 25 lines, wherever the other pair's lines are
    val, test = heldout.heldout_indices(25, 4, 3, 7)
    at = lambda k: inside[k]
    assert heldout.heldout_indices(50, 4, 3, 7, eligible) == ([at(k) for k in val], [at(k) for k in test])
