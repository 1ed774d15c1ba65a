"""A fetched file into lines: compression undone, then the decoding policy.

Every input is made here; nothing comes from the network.
"""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest

from pipeline.data import formats
from pipeline.errors import UserError


def message(call, *args) -> str:
    with pytest.raises(UserError) as e:
        call(*args)
    return e.value.message


# --- decompress -------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress, bz2.compress])
def test_decompress_knows_gzip_xz_and_bzip2_by_their_bytes_not_their_name(compress):
    data = "ä\nb\n".encode()
    assert formats.decompress(compress(data), "plain.txt") == data


def test_decompress_passes_plain_data_through_even_if_it_starts_like_bzip2():
    for plain in (b"a\nb\n", b"BZh9 is a line\n", b""):
        assert formats.decompress(plain, "f.gz") == plain


@pytest.mark.parametrize(
    ("compress", "kind"), [(gzip.compress, "gzip"), (lzma.compress, "xz"), (bz2.compress, "bzip2")]
)
def test_a_truncated_or_corrupt_stream_names_the_file_and_says_fetch_again(compress, kind):
    data = compress(b"a line\n" * 1000)
    for broken in (data[:-10], data[:20] + b"\x00" * 20 + data[40:]):
        text = message(formats.decompress, broken, "corpus.bin")
        assert text.startswith(f"corpus.bin: a corrupt or truncated {kind} file (")
        assert text.endswith("; fetch it again")


# --- text_lines: the decoding policy (docs/corpus-decoding.md) ----------------------------


def test_bom_crlf_and_cr_line_endings():
    assert formats.text_lines("\ufeffa\r\nb\r\n".encode(), "f") == ["a", "b"]
    assert formats.text_lines(b"a\rb\rc", "f") == ["a", "b", "c"]  # an old Mac file
    assert formats.text_lines(b"a\rx\nb\n", "f") == ["a\rx", "b"]  # a stray CR is no line end
    assert formats.text_lines(gzip.compress("\ufeffä\r\n".encode()), "f") == ["ä"]


@pytest.mark.parametrize("compress", [lzma.compress, bz2.compress])
def test_xz_and_bzip2_files_decode_like_gzip(compress):
    assert formats.text_lines(compress("\ufeffä\r\nb\n".encode()), "f") == ["ä", "b"]


def test_lines_split_on_lf_only():
    text = "a\x1cb\x85c\u2028d\u2029e\x0bf\x0cg\nh\n"
    assert formats.text_lines(text.encode(), "f") == ["a\x1cb\x85c\u2028d\u2029e\x0bf\x0cg", "h"]


def test_empty_lines_are_lines_but_an_empty_file_is_an_error():
    assert formats.text_lines(b"\n\n", "f") == ["", ""]
    assert formats.text_lines(b"a\n\nb", "f") == ["a", "", "b"]
    for empty in (b"", "\ufeff".encode(), gzip.compress(b""), lzma.compress(b"")):
        with pytest.raises(UserError, match="f: the file is empty"):
            formats.text_lines(empty, "f")


def test_invalid_utf8_names_the_file_and_the_line():
    text = message(formats.text_lines, b"ok\r\nstill ok\r\nbad \xff byte\nok\n", "a.src")
    assert text == "a.src: invalid UTF-8 at line 3 (invalid start byte); re-encode the file as UTF-8"


def test_corrupt_gzip_is_refused():
    with pytest.raises(UserError, match="corrupt or truncated gzip"):
        formats.text_lines(gzip.compress(b"a\n" * 100)[:-10], "f")
