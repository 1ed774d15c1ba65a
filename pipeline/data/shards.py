"""The shard format: one side of a split's sentences as a pair of flat files.

  {prefix}.bin  the ids of every sentence end to end, no BOS/EOS: little-endian uint16
                when every id fits, else int32
  {prefix}.idx  little-endian int64 offsets into .bin, n+1 of them from 0

The binarize stage writes them (`ShardWriter`), training maps them (`open_shard`),
tests and benchmarks write small ones (`write_shard`); nothing else knows the layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from pipeline.errors import UserError

# itemsize -> dtype: the two a .bin may hold
DTYPES: dict[int, np.dtype[np.integer]] = {2: np.dtype("<u2"), 4: np.dtype("<i4")}


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 where every id fits, else int32."""
    return DTYPES[2] if vocab_size <= 2**16 else DTYPES[4]


def offsets_of(lengths: np.ndarray | Sequence[int]) -> np.ndarray:
    """The .idx content of sentences of these lengths: n+1 int64 offsets from 0."""
    offsets = np.zeros(len(lengths) + 1, dtype="<i8")
    np.cumsum(lengths, out=offsets[1:])
    return offsets


class ShardWriter:
    """Writes one shard a block of sentences at a time: `write(lengths, ids)`, then the .idx on close."""

    def __init__(self, prefix: Path) -> None:
        self.prefix = prefix
        self._out = open(f"{prefix}.bin", "wb")
        self._lengths: list[np.ndarray] = [np.zeros(0, np.int64)]

    def write(self, lengths: np.ndarray, ids: np.ndarray) -> None:
        """Sentences of these lengths whose ids, end to end, are `ids` (already of the shard's dtype)."""
        self._out.write(np.ascontiguousarray(ids).tobytes())
        self._lengths.append(np.asarray(lengths, dtype=np.int64))

    def close(self) -> np.ndarray:
        """Finish the .bin, write the .idx; returns every sentence's length (also kept as .lengths)."""
        self._out.close()
        self.lengths = np.concatenate(self._lengths)
        offsets_of(self.lengths).tofile(f"{self.prefix}.idx")
        return self.lengths

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
        else:
            self._out.close()


def write_shard(prefix: Path, seqs: Sequence[Sequence[int] | np.ndarray], dtype: str = "<u2") -> None:
    """One shard of these sentences at once (tests and benchmarks; binarize streams with ShardWriter)."""
    arrays = [np.asarray(s, dtype=dtype) for s in seqs]
    with ShardWriter(prefix) as out:
        ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)
        out.write(np.array([len(a) for a in arrays], dtype=np.int64), ids)


def open_shard(prefix: Path) -> tuple[np.ndarray, np.ndarray]:
    """A shard's (ids, offsets), both mapped read-only; offsets has n+1 entries from 0."""
    bin_path, idx_path = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
    for path in (bin_path, idx_path):
        if not path.is_file():
            raise UserError(f"{path}: missing; run the binarize stage (`python -m pipeline binarize`)")
    idx_bytes = idx_path.stat().st_size
    if idx_bytes < 8 or idx_bytes % 8:
        raise UserError(f"{idx_path}: not an index of int64 offsets (corrupt?); rerun binarize")
    offsets = np.memmap(idx_path, dtype="<i8", mode="r")
    n_tokens, n_bytes = int(offsets[-1]), bin_path.stat().st_size
    itemsize = n_bytes // n_tokens if n_tokens > 0 else 2
    if n_tokens < 0 or offsets[0] != 0 or itemsize not in DTYPES or itemsize * n_tokens != n_bytes:
        raise UserError(f"{prefix}.bin/.idx: sizes do not match (corrupt?); rerun binarize")
    # np.memmap cannot map an empty file; an empty array reads the same.
    tokens = (
        np.memmap(bin_path, dtype=DTYPES[itemsize], mode="r")
        if n_tokens > 0
        else np.zeros(0, dtype=DTYPES[itemsize])
    )
    return tokens, offsets
