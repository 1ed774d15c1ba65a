"""Exact dedupe of a stream of 64-bit hashes in memory that does not grow with the stream.

`SpilledHashes` appends each hash, with its position in the stream, to one of BUCKETS files
on disk chosen by its top bits; `duplicates()` then reads one bucket at a time and returns a
bitmap with bit i set when hash i equals an earlier one. Memory: a bucket (n / BUCKETS records
of 16 bytes, sorted once) and the n-bit bitmap, 1.25 MB at 10M hashes; disk: 16 bytes a hash
until the context ends. The bitmap's bits are little-endian within a byte (np.packbits'
bitorder="little"); `bits_range` unpacks a stretch of it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import TracebackType

import numpy as np

BUCKET_BITS = 6
BUCKETS = 1 << BUCKET_BITS  # 64: a bucket holds 2.5 MB at 10M hashes, 250 MB only at 1G
RECORD = np.dtype([("hash", "<u8"), ("index", "<u8")])


def first_occurrences(hashes: np.ndarray) -> np.ndarray:
    """For each hash in order: True if no earlier hash is equal."""
    first = np.zeros(len(hashes), dtype=bool)
    first[np.unique(hashes, return_index=True)[1]] = True  # return_index gives the first of equals
    return first


def bits_range(bits: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Bits start..stop-1 of a little-endian packed bitmap, as booleans."""
    offset = start & 7
    unpacked = np.unpackbits(bits[start >> 3 : (stop + 7) >> 3], bitorder="little")
    return unpacked[offset : offset + stop - start].astype(bool)


class SpilledHashes:
    """Hashes appended in order (`add`), spilled to bucket files under a temporary directory.

    Use as a context manager: the directory and its files are removed when it ends.
    """

    def __init__(self, scratch: Path) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="dedupe.", dir=scratch)
        root = Path(self._dir.name)
        self._paths = [root / f"{b:02d}.bin" for b in range(BUCKETS)]
        self._files = [open(path, "wb") for path in self._paths]  # closed by duplicates() or __exit__
        self.count = 0

    def __enter__(self) -> SpilledHashes:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._close()
        self._dir.cleanup()

    def _close(self) -> None:
        for f in self._files:
            f.close()

    def add(self, hashes: np.ndarray) -> None:
        """Append `hashes` (uint64) after those added before."""
        records = np.empty(len(hashes), dtype=RECORD)
        records["hash"] = hashes
        records["index"] = np.arange(self.count, self.count + len(hashes), dtype=np.uint64)
        bucket = (records["hash"] >> np.uint64(64 - BUCKET_BITS)).astype(np.intp)
        records = records[np.argsort(bucket, kind="stable")]  # each bucket's records stay in order
        ends = np.cumsum(np.bincount(bucket, minlength=BUCKETS))
        for b, (start, end) in enumerate(zip([0, *ends[:-1]], ends)):
            if end > start:
                self._files[b].write(records[start:end].tobytes())
        self.count += len(hashes)

    def duplicates(self) -> np.ndarray:
        """The packed bitmap of the hashes added: bit i set if hash i equals an earlier one."""
        self._close()
        bits = np.zeros((self.count + 7) // 8, dtype=np.uint8)
        for path in self._paths:
            records = np.fromfile(path, dtype=RECORD)
            if len(records) < 2:
                continue
            index = records["index"][~first_occurrences(records["hash"])]
            np.bitwise_or.at(
                bits, index >> np.uint64(3), np.left_shift(1, index & np.uint64(7)).astype(np.uint8)
            )
            path.unlink()
        return bits
