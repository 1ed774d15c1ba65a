from __future__ import annotations

import random

import pytest

from pipeline.data import lines


@pytest.mark.parametrize("read_bytes", [1, 3, 64])
def test_lines_are_counted_whatever_the_block_size(tmp_path, monkeypatch, read_bytes):
    path = tmp_path / "text"
    path.write_bytes(b"one\n\ntwo two\nthree\r\nlast, with no line end")
    monkeypatch.setattr(lines, "READ_BYTES", read_bytes)
    with open(path, "rb") as f:
        got = [lines.skip_lines(f, 2) for _ in range(4)]
    assert got == [(2, 5), (2, 15), (1, 22), (0, 0)]  # (lines, bytes)


def test_lines_are_counted_in_chunks_on_random_text(tmp_path, monkeypatch):
    rng = random.Random(0)
    for trial in range(200):
        text = [b"x" * rng.choice([0, 1, 2, 5, 40]) + b"\n" for _ in range(rng.randrange(0, 60))]
        text += [b"tail"] if trial % 3 == 0 else []  # a last line without a line end
        (tmp_path / "text").write_bytes(b"".join(text))
        monkeypatch.setattr(lines, "READ_BYTES", rng.choice([1, 7, 64, 1 << 20]))
        n = rng.randrange(1, 20)
        chunks = [text[i : i + n] for i in range(0, len(text), n)]
        want = [(len(chunk), len(b"".join(chunk))) for chunk in chunks] + [(0, 0)]
        with open(tmp_path / "text", "rb") as f:
            assert [lines.skip_lines(f, n) for _ in want] == want, (text, n)
