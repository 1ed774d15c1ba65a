"""The shard format: what write_shard and ShardWriter write, open_shard maps back, byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.data.shards import ShardWriter, offsets_of, open_shard, token_dtype, write_shard
from pipeline.errors import UserError

SENTENCES = [[5, 6, 7], [], [8], [9, 10]]


def test_a_shard_reads_back_as_written(tmp_path: Path) -> None:
    write_shard(tmp_path / "s", SENTENCES)
    ids, offsets = open_shard(tmp_path / "s")
    assert offsets.tolist() == [0, 3, 3, 4, 6] and ids.dtype == np.dtype("<u2")
    assert [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(SENTENCES))] == SENTENCES
    assert (tmp_path / "s.bin").stat().st_size == 2 * 6  # uint16, no BOS/EOS


def test_streamed_blocks_write_the_same_files_as_one_write(tmp_path: Path) -> None:
    write_shard(tmp_path / "once", SENTENCES)
    with ShardWriter(tmp_path / "streamed") as out:
        out.write(np.array([3, 0]), np.array([5, 6, 7], dtype="<u2"))
        out.write(np.array([1, 2]), np.array([8, 9, 10], dtype="<u2"))
    assert out.lengths.tolist() == [3, 0, 1, 2]
    for ext in ("bin", "idx"):
        assert (tmp_path / f"streamed.{ext}").read_bytes() == (tmp_path / f"once.{ext}").read_bytes()


def test_ids_past_uint16_are_int32_and_read_back(tmp_path: Path) -> None:
    assert token_dtype(2**16) == np.dtype("<u2") and token_dtype(2**16 + 1) == np.dtype("<i4")
    write_shard(tmp_path / "wide", [[70000, 1], [2]], dtype="<i4")
    ids, offsets = open_shard(tmp_path / "wide")
    assert ids.dtype == np.dtype("<i4") and ids.tolist() == [70000, 1, 2] and offsets.tolist() == [0, 2, 3]


def test_an_empty_shard_opens_as_no_sentences(tmp_path: Path) -> None:
    write_shard(tmp_path / "empty", [])
    ids, offsets = open_shard(tmp_path / "empty")
    assert len(ids) == 0 and offsets.tolist() == [0]
    assert offsets_of([]).tolist() == [0]


def test_a_truncated_bin_is_refused_with_the_fix(tmp_path: Path) -> None:
    write_shard(tmp_path / "s", SENTENCES)
    data = (tmp_path / "s.bin").read_bytes()
    (tmp_path / "s.bin").write_bytes(data[:-2])
    with pytest.raises(UserError, match=r"sizes do not match.*rerun binarize"):
        open_shard(tmp_path / "s")
