"""Training data: memory-mapped arrays, token-budget batches, sharding, padding."""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.data.batching import (
    Batch,
    ParallelData,
    TokenArray,
    collate,
    collate_src,
    epoch_batches,
    shard,
    token_batches,
)
from pipeline.errors import UserError
from pipeline.tokens import BOS, EOS, PAD


def write_array(prefix: Path, sentences: list[list[int]], dtype: str = "<u2") -> None:
    """The .bin/.idx format binarize writes (see binarize.py)."""
    lens = [len(s) for s in sentences]
    np.concatenate([[0], np.cumsum(lens)]).astype("<i8").tofile(f"{prefix}.idx")
    np.array([t for s in sentences for t in s], dtype=dtype).tofile(f"{prefix}.bin")


SRC = [[10, 11, 12], [13], [], [14, 15, 16, 17, 18], [19, 20]]
TGT = [[30, 31], [32, 33, 34, 35], [36], [37], [38, 39, 40]]


@pytest.fixture
def data(tmp_path: Path) -> ParallelData:
    write_array(tmp_path / "train.src", SRC)
    write_array(tmp_path / "train.tgt", TGT)
    return ParallelData.load(tmp_path, "train")


# --- TokenArray / ParallelData ---------------------------------------------------


def test_token_array_is_memory_mapped_and_reads_sentences(data: ParallelData) -> None:
    array = data.src
    ((ids, offsets),) = array.shards
    assert isinstance(ids, np.memmap) and ids.filename is not None and isinstance(offsets, np.memmap)
    assert len(array) == len(SRC) and array.lengths.tolist() == [len(s) for s in SRC]
    assert [array[i].tolist() for i in range(len(array))] == SRC
    assert array[-1].tolist() == SRC[-1]
    with pytest.raises(IndexError):
        array[len(SRC)]


def test_token_array_pickles_as_its_path(tmp_path: Path) -> None:
    write_array(tmp_path / "big", [[7] * 1000] * 100)
    array = TokenArray(tmp_path / "big")
    blob = pickle.dumps(array)
    assert len(blob) < 1000  # the 200 kB of tokens are not copied
    copy = pickle.loads(blob)
    assert isinstance(copy.shards[0][0], np.memmap) and copy[99].tolist() == [7] * 1000


def test_token_array_int32_empty_and_corrupt(tmp_path: Path) -> None:
    write_array(tmp_path / "wide", [[70000, 1], [2]], dtype="<i4")
    assert TokenArray(tmp_path / "wide")[0].tolist() == [70000, 1]
    write_array(tmp_path / "empty", [[], []])
    assert TokenArray(tmp_path / "empty").lengths.tolist() == [0, 0]
    write_array(tmp_path / "bad", [[1, 2, 3]])
    np.zeros(5, "<u2").tofile(tmp_path / "bad.bin")  # 10 bytes for 3 tokens
    with pytest.raises(UserError, match="rerun binarize"):
        TokenArray(tmp_path / "bad")
    with pytest.raises(UserError, match="missing"):
        TokenArray(tmp_path / "absent")


def test_parallel_data_refuses_misaligned_sides(tmp_path: Path) -> None:
    write_array(tmp_path / "val.src", SRC)
    write_array(tmp_path / "val.tgt", TGT[:-1])
    with pytest.raises(UserError, match=r"val.src has 5 sentences but val.tgt has 4"):
        ParallelData.load(tmp_path, "val")


# --- token_batches / shard -------------------------------------------------------


def random_lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 60, n), rng.integers(0, 60, n)


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def cost(batch: np.ndarray, src: np.ndarray, tgt: np.ndarray) -> int:
    return len(batch) * int(max((src[batch] + 1).max(), (tgt[batch] + 1).max()))


def test_batches_cover_every_sentence_once_within_the_budget() -> None:
    src, tgt = random_lengths(3000)
    src[17], tgt[99] = 700, 900  # each alone exceeds the budget
    batches = token_batches(src, tgt, 512, shuffle=True, seed=1, epoch=0)
    everything = np.concatenate(batches)
    assert np.array_equal(np.sort(everything), np.arange(3000))
    for batch in batches:
        assert cost(batch, src, tgt) <= 512 or len(batch) == 1
    assert [17] in [b.tolist() for b in batches] and [99] in [b.tolist() for b in batches]


def test_unshuffled_batches_are_sorted_and_greedily_full() -> None:
    src, tgt = random_lengths(2000, seed=3)
    batches = token_batches(src, tgt, 400, shuffle=False, seed=0, epoch=0)
    order = np.concatenate(batches)
    keys = list(zip(src[order].tolist(), tgt[order].tolist()))
    assert keys == sorted(keys)
    assert order.tolist() == sorted(range(2000), key=lambda i: (src[i], tgt[i]))  # ties by index
    for batch, following in itertools.pairwise(batches):  # greedy: the next sentence did not fit
        assert cost(np.append(batch, following[0]), src, tgt) > 400
    assert same(token_batches(src, tgt, 400, shuffle=False, seed=5, epoch=9), batches)  # seed unused


def test_shuffle_is_reproducible_and_differs_by_epoch_and_seed() -> None:
    src, tgt = random_lengths(2000, seed=4)
    first = token_batches(src, tgt, 600, shuffle=True, seed=7, epoch=0)
    assert same(first, token_batches(src, tgt, 600, shuffle=True, seed=7, epoch=0))
    assert not same(first, token_batches(src, tgt, 600, shuffle=True, seed=7, epoch=1))
    assert not same(first, token_batches(src, tgt, 600, shuffle=True, seed=8, epoch=0))
    # Ties are broken at random too: equal-length sentences do not always group the same way.
    flat = np.zeros(2000, dtype=np.int64)
    a = token_batches(flat, flat, 50, shuffle=True, seed=1, epoch=0)
    b = token_batches(flat, flat, 50, shuffle=True, seed=1, epoch=1)
    assert {tuple(sorted(x.tolist())) for x in a} != {tuple(sorted(x.tolist())) for x in b}


@settings(max_examples=50, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=200),
    max_tokens=st.integers(1, 300),
    seed=st.integers(0, 2**31),
)
def test_batch_invariants_hold_for_any_lengths(
    lens: list[tuple[int, int]], max_tokens: int, seed: int
) -> None:
    src, tgt = np.array([s for s, _ in lens]), np.array([t for _, t in lens])
    batches = token_batches(src, tgt, max_tokens, shuffle=True, seed=seed, epoch=2)
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(len(lens)))
    assert all(cost(b, src, tgt) <= max_tokens or len(b) == 1 for b in batches)


def test_shard_gives_disjoint_equal_shares() -> None:
    batches = [np.array([i]) for i in range(11)]
    shares = [shard(batches, rank, 3) for rank in range(3)]
    assert [len(s) for s in shares] == [3, 3, 3]  # 11 % 3 = 2 dropped
    taken = [int(b[0]) for s in shares for b in s]
    assert len(set(taken)) == 9 and set(taken) <= set(range(11))
    assert shard(batches, 0, 1) == batches


def test_epoch_batches_shards_one_epochs_batches(data: ParallelData) -> None:
    whole = epoch_batches(data, 8, shuffle=True, seed=1, epoch=3)
    assert same(whole, token_batches(data.src.lengths, data.tgt.lengths, 8, shuffle=True, seed=1, epoch=3))
    halves = [epoch_batches(data, 8, shuffle=True, seed=1, epoch=3, rank=r, world_size=2) for r in (0, 1)]
    usable = len(whole) // 2 * 2  # an odd last batch is dropped
    assert same(halves[0], whole[0:usable:2]) and same(halves[1], whole[1:usable:2])


# --- collate ---------------------------------------------------------------------


def test_collate_pads_and_places_bos_eos(data: ParallelData) -> None:
    batch = collate(data, [3, 2, 0])
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.int64
    assert batch.src.tolist() == [
        [14, 15, 16, 17, 18, EOS],
        [EOS, PAD, PAD, PAD, PAD, PAD],
        [10, 11, 12, EOS, PAD, PAD],
    ]
    assert batch.tgt_in.tolist() == [[BOS, 37, PAD], [BOS, 36, PAD], [BOS, 30, 31]]
    assert batch.tgt_out.tolist() == [[37, EOS, PAD], [36, EOS, PAD], [30, 31, EOS]]
    assert batch.n_src_tokens == int((batch.src != PAD).sum()) == 6 + 1 + 4  # each sentence + its EOS
    assert batch.n_tgt_tokens == int((batch.tgt_out != PAD).sum()) == 2 + 2 + 3  # each sentence + its EOS
    assert batch.indices.tolist() == [3, 2, 0] and len(batch) == 3


def test_collate_of_every_batch_matches_the_data(data: ParallelData) -> None:
    for indices in token_batches(data.src.lengths, data.tgt.lengths, 12, shuffle=True, seed=0, epoch=0):
        batch = collate(data, indices)
        for row, i in enumerate(indices):
            n_src, n_tgt = len(SRC[i]), len(TGT[i])
            assert batch.src[row, :n_src].tolist() == SRC[i] and batch.src[row, n_src] == EOS
            assert batch.tgt_in[row, 1 : n_tgt + 1].tolist() == TGT[i] == batch.tgt_out[row, :n_tgt].tolist()
        assert batch.src.numel() <= 12 or len(batch) == 1


def test_collate_src_for_decoding() -> None:
    src = collate_src([[5, 6, 7], [], [8]])
    assert src.dtype == torch.int64
    assert src.tolist() == [[5, 6, 7, EOS], [EOS, PAD, PAD, PAD], [8, EOS, PAD, PAD]]


def test_batch_to_moves_tensors_only(data: ParallelData) -> None:
    batch = collate(data, [0, 1])
    moved = batch.to("meta")
    assert isinstance(moved, Batch)
    assert moved.src.device.type == moved.tgt_in.device.type == moved.tgt_out.device.type == "meta"
    assert moved.n_src_tokens == batch.n_src_tokens and moved.indices is batch.indices
    assert batch.src.device.type == "cpu"  # the original is untouched


# --- source weights ------------------------------------------------------------------
