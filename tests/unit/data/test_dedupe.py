import numpy as np

from pipeline.data import dedupe


def reference(hashes: list[int]) -> list[bool]:
    seen: set[int] = set()
    out = []
    for h in hashes:
        out.append(h in seen)
        seen.add(h)
    return out


def test_first_occurrences_marks_the_first_of_equal_hashes():
    hashes = np.array([5, 3, 5, 5, 2, 3], dtype=np.uint64)
    assert dedupe.first_occurrences(hashes).tolist() == [True, True, False, False, True, False]


def test_spilled_hashes_mark_every_later_equal_hash_across_chunks_and_buckets(tmp_path):
    rng = np.random.default_rng(0)
    # Few distinct values spread over every bucket: many duplicates, near and far apart.
    top = np.arange(dedupe.BUCKETS, dtype=np.uint64) << np.uint64(64 - dedupe.BUCKET_BITS)
    values = np.concatenate([top | np.uint64(12345), rng.integers(0, 2**64, 300, dtype=np.uint64)])
    stream: list[int] = []
    with dedupe.SpilledHashes(tmp_path) as spilled:
        for size in rng.integers(0, 50, 80):
            chunk = values[rng.integers(0, len(values), size)]
            spilled.add(chunk)
            stream += chunk.tolist()
        bits = spilled.duplicates()
    assert len({h >> (64 - dedupe.BUCKET_BITS) for h in stream}) == dedupe.BUCKETS  # every bucket used
    assert dedupe.bits_range(bits, 0, len(stream)).tolist() == reference(stream)
    assert list(tmp_path.iterdir()) == []  # the bucket files are gone with the context


def test_bits_range_reads_any_stretch_of_the_bitmap():
    flags = np.random.default_rng(1).random(77) < 0.3
    bits = np.packbits(flags, bitorder="little")
    for start, stop in [(0, 77), (3, 11), (8, 16), (13, 14), (70, 77), (5, 5)]:
        assert dedupe.bits_range(bits, start, stop).tolist() == flags[start:stop].tolist()


def test_nothing_added_gives_an_empty_bitmap(tmp_path):
    with dedupe.SpilledHashes(tmp_path) as spilled:
        assert len(spilled.duplicates()) == 0
