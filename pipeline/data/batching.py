"""Training data: memory-mapped token arrays in shards, token-budget batches, padded tensors.

Shapes: B sentences in a batch, S source length, T target length (both
including the EOS or BOS that is added here; the stored ids have neither).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from pipeline.data import artifacts
from pipeline.data.shards import open_shard
from pipeline.errors import UserError
from pipeline.files import SIDES
from pipeline.tokens import BOS, EOS, PAD

_BLOCK = 1 << 16  # sentences per block where a per-sentence Python loop needs a list


class TokenArray:
    """Sentences of one split's side: one or more shards, each a .bin/.idx pair, memory-mapped.

    Only the per-sentence lengths (int32) are built in memory; ids and offsets stay
    in the mapped files, so a corpus larger than RAM reads with memory flat.
    """

    def __init__(self, prefix: str | Path | Sequence[str | Path]) -> None:
        prefixes = [prefix] if isinstance(prefix, (str, Path)) else list(prefix)
        self.prefixes = [Path(p) for p in prefixes]
        self._shards = [open_shard(p) for p in self.prefixes]
        counts = [len(offsets) - 1 for _, offsets in self._shards]
        self._starts = np.zeros(len(counts) + 1, dtype=np.int64)  # sentence id of each shard's first
        np.cumsum(counts, out=self._starts[1:])
        lengths = [np.diff(offsets).astype(np.int32) for _, offsets in self._shards]
        self.lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int32)  # (n,)

    @classmethod
    def from_arrays(cls, ids: np.ndarray, offsets: np.ndarray) -> TokenArray:
        """Sentences held in memory, as one shard's (ids, offsets) (an epoch's sampled segmentation)."""
        array = cls.__new__(cls)
        array.prefixes = []
        array._shards = [(ids, offsets)]
        array._starts = np.array([0, len(offsets) - 1], dtype=np.int64)
        array.lengths = np.diff(offsets).astype(np.int32)
        return array

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def shards(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each shard's (ids, offsets) arrays, memory-mapped."""
        return list(self._shards)

    def __getitem__(self, i: int) -> np.ndarray:
        """Sentence i's ids, a read-only view into the mapped file."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"sentence {i} out of range for {len(self)} sentences")
        i %= len(self)
        if len(self._shards) == 1:
            tokens, offsets = self._shards[0]
            return tokens[offsets[i] : offsets[i + 1]]
        shard = int(np.searchsorted(self._starts, i, side="right")) - 1
        tokens, offsets = self._shards[shard]
        j = i - int(self._starts[shard])
        return tokens[offsets[j] : offsets[j + 1]]

    # A pickled np.memmap carries its whole content; send only the paths and reopen.
    def __getstate__(self) -> dict:
        return {"prefixes": self.prefixes}

    def __setstate__(self, state: dict) -> None:
        TokenArray.__init__(self, state["prefixes"])  # the class's own: self.__init__ could be a subclass's


def shard_prefixes(bin_dir: Path, split: str, side: str) -> list[Path]:
    """The shards of a split's side, as binarize's meta.json lists them ({split}.{side} without one)."""
    meta = artifacts.read_record(bin_dir / artifacts.BIN_META) or {}
    shards = (meta.get("shards") or {}).get(split)
    if shards is not None:
        return [bin_dir / f"{split}.{side}.{k:05d}" for k in range(len(shards))]
    return [bin_dir / f"{split}.{side}"]


@dataclass
class ParallelData:
    """Line-aligned source and target sentences of one split."""

    src: TokenArray
    tgt: TokenArray

    @classmethod
    def load(cls, bin_dir: str | Path, split: str) -> ParallelData:
        bin_dir = Path(bin_dir)
        data = cls(*(TokenArray(shard_prefixes(bin_dir, split, side)) for side in SIDES))
        if len(data.src) != len(data.tgt):
            raise UserError(
                f"{bin_dir}: {split}.src has {len(data.src)} sentences but {split}.tgt has "
                f"{len(data.tgt)}; rerun the binarize stage"
            )
        return data

    def __len__(self) -> int:
        return len(self.src)


# --- batching ------------------------------------------------------------------


def token_batches(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    max_tokens: int,
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
) -> list[np.ndarray]:
    """Split sentence indices into batches of at most max_tokens padded tokens.

    As fairseq: sort by (source, target) length, so a batch holds sentences of
    about one length and little padding, then cut greedily so that
    B * max(S, T) <= max_tokens, with S and T counting the added EOS/BOS. A
    sentence longer than max_tokens on its own gets a batch of its own. With
    shuffle, equal lengths are ordered at random and the batch order is
    shuffled, from a generator seeded by (seed, epoch): reproducible, and
    different every epoch. Without, batches come in sorted order (seed and
    epoch unused).
    """
    assert len(src_lens) == len(tgt_lens), "src_lens and tgt_lens must have one entry per sentence"
    # One int64 key sorts by source, then target length (each + its EOS / BOS): its
    # stable argsort is faster than np.lexsort with a random tie-break key
    # (docs/cpu-speed.md). This runs every epoch and its temporaries are the data path's
    # peak, so each goes as soon as it is used (its size at 1M pairs: reports/bench.md).
    key = (np.asarray(src_lens, dtype=np.int64) + 1) << 32
    key |= np.asarray(tgt_lens, dtype=np.int64) + 1
    if shuffle:
        rng = np.random.default_rng([seed, epoch])
        order = rng.permutation(len(key))
        order = order[np.argsort(key[order], kind="stable")]  # ties keep the random order
    else:
        order = np.argsort(key, kind="stable")
    del key
    order = order.astype(np.int32)  # held all epoch: half the bytes
    batches = np.split(order, _greedy_cuts(src_lens, tgt_lens, order, max_tokens))
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def _greedy_cuts(src_lens: np.ndarray, tgt_lens: np.ndarray, order: np.ndarray, max_tokens: int) -> list[int]:
    """Positions in `order` where a new batch starts, so that size * its widest <= max_tokens.

    A sentence's width is max(S, T) with the EOS / BOS.
    """
    # A plain loop: the running maximum depends on where the last cut fell, which
    # numpy cannot express (docs/cpu-speed.md has its time). Widths are
    # made a block at a time, so no O(sentences) list or array is built for it.
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
    cuts: list[int] = []
    size, widest = 0, 0
    for start in range(0, len(order), _BLOCK):
        block = order[start : start + _BLOCK]
        widths = np.maximum(src_lens[block], tgt_lens[block]) + 1
        for i, width in enumerate(widths.tolist(), start):
            widest = max(widest, width)
            if size and (size + 1) * widest > max_tokens:
                cuts.append(i)
                size, widest = 0, width
            size += 1
    return cuts


def shard(batches: list[np.ndarray], rank: int, world_size: int) -> list[np.ndarray]:
    """This rank's share of the batches: every world_size-th, from `rank`.

    Every rank gets the same number (data-parallel ranks step in lockstep), so
    the last len(batches) % world_size batches are dropped. They are a
    different few each shuffled epoch, so no sentence is lost for good; for
    shuffle=False (evaluation) prefer not sharding, or accept the loss.
    Interleaving (not contiguous blocks) gives ranks at one step batches of
    similar length when the list is sorted.
    """
    assert 0 <= rank < world_size, f"rank {rank} outside world_size {world_size}"
    usable = len(batches) - len(batches) % world_size
    return batches[rank:usable:world_size]


def epoch_batches(
    data: ParallelData,
    max_tokens: int,
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
    rank: int = 0,
    world_size: int = 1,
    ids: np.ndarray | None = None,
) -> list[np.ndarray]:
    """This rank's batches of sentence indices for one epoch, of the sentences `ids` (default: all).

    A list, so that resuming can skip the first k.
    """
    src, tgt = data.src.lengths, data.tgt.lengths
    if ids is not None:
        src, tgt = src[ids], tgt[ids]
    batches = token_batches(src, tgt, max_tokens, shuffle=shuffle, seed=seed, epoch=epoch)
    if ids is not None:
        batches = [ids[b] for b in batches]  # positions in ids -> sentence indices
    return shard(batches, rank, world_size)


# --- padded tensors ------------------------------------------------------------


@dataclass
class Batch:
    """One training batch; PAD fills the ends of shorter rows."""

    src: torch.Tensor  # (B, S) int64: tokens + EOS
    tgt_in: torch.Tensor  # (B, T) int64: BOS + tokens (decoder input)
    tgt_out: torch.Tensor  # (B, T) int64: tokens + EOS (what the decoder must predict)
    n_src_tokens: int  # non-PAD entries of src
    n_tgt_tokens: int  # non-PAD entries of tgt_out
    indices: np.ndarray  # (B,) sentence ids in the split

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy with the tensors on `device` (non_blocking needs pinned memory to overlap)."""
        return replace(
            self,
            src=self.src.to(device, non_blocking=non_blocking),
            tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
            tgt_out=self.tgt_out.to(device, non_blocking=non_blocking),
        )


def collate(data: ParallelData, indices: Sequence[int] | np.ndarray) -> Batch:
    """Pad the sentences `indices` of `data` into a Batch."""
    indices = np.asarray(indices, dtype=np.int64)
    src_seqs = [data.src[i] for i in indices]
    tgt_seqs = [data.tgt[i] for i in indices]
    src_lens, tgt_lens = data.src.lengths[indices], data.tgt.lengths[indices]
    return Batch(
        src=_pad(src_seqs, src_lens, bos=False, eos=True),
        tgt_in=_pad(tgt_seqs, tgt_lens, bos=True, eos=False),
        tgt_out=_pad(tgt_seqs, tgt_lens, bos=False, eos=True),
        n_src_tokens=int(src_lens.sum()) + len(indices),
        n_tgt_tokens=int(tgt_lens.sum()) + len(indices),
        indices=indices,
    )


def collate_src(seqs: Sequence[Sequence[int]]) -> torch.Tensor:
    """Source ids for decoding: each row ids + EOS, right-padded with PAD: (B, S) int64."""
    lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    return _pad([np.asarray(s, dtype=np.int64) for s in seqs], lens, bos=False, eos=True)


def _pad(seqs: Sequence[np.ndarray], lens: np.ndarray, *, bos: bool, eos: bool) -> torch.Tensor:
    """Rows of [BOS] + seq + [EOS] (each optional), right-padded with PAD: (B, L) int64."""
    start = int(bos)
    out = np.full((len(seqs), int(lens.max(initial=0)) + bos + eos), PAD, dtype=np.int64)  # (B, L)
    cols = np.arange(out.shape[1])[None, :]  # (1, L)
    body = (cols >= start) & (cols < start + lens[:, None])  # (B, L)
    if len(seqs):
        # Boolean-mask assignment fills row by row, so the concatenated ids land in order.
        out[body] = np.concatenate(seqs)
    if bos:
        out[:, 0] = BOS
    if eos:
        out[np.arange(len(seqs)), start + lens] = EOS
    return torch.from_numpy(out)
