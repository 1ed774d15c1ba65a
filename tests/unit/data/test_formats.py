"""A fetched file into line-aligned text: compression, archives, and the formats text and TSV.

Every input is a small file built here; nothing comes from the network.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
import zipfile

import pytest

from pipeline.data import formats
from pipeline.errors import UserError


def tar_bytes(members: dict[str, bytes], compression: str = "") -> bytes:
    """A tar archive of `members` (name -> bytes), compressed with "gz", "xz", "bz2" or not at all."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("corpus/", b"")  # a directory entry: never listed as a member
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


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


# --- archive_member ---------------------------------------------------------------------

MEMBERS = {"corpus/train.de": b"eins\nzwei\n", "corpus/train.en": b"one\ntwo\n"}


@pytest.mark.parametrize("compression", ["", "gz", "xz", "bz2"])
def test_reads_each_member_of_a_tar_plain_or_compressed(tmp_path, compression):
    path = tmp_path / "corpus.tar"
    path.write_bytes(tar_bytes(MEMBERS, compression))
    for member, data in MEMBERS.items():
        assert formats.archive_member(path.read_bytes(), member, str(path)) == data


def test_reads_a_member_of_a_zip(tmp_path):
    path = tmp_path / "corpus.zip"
    path.write_bytes(zip_bytes(MEMBERS))
    assert formats.archive_member(path.read_bytes(), "corpus/train.en", str(path)) == b"one\ntwo\n"


def test_a_leading_dot_slash_does_not_matter():
    data = tar_bytes({"./corpus/train.de": b"eins\n"}, "gz")
    assert formats.archive_member(data, "corpus/train.de", "c.tgz") == b"eins\n"
    assert formats.archive_member(tar_bytes(MEMBERS), "./corpus/train.de", "c.tar") == b"eins\nzwei\n"


@pytest.mark.parametrize("build", [lambda m: tar_bytes(m, "gz"), zip_bytes])
def test_a_missing_member_lists_the_files_the_archive_holds(build):
    text = message(formats.archive_member, build(MEMBERS), "corpus/train.fr", "corpus.tgz")
    assert text == (
        "corpus.tgz: the archive holds no file 'corpus/train.fr'; fix the member name. "
        "It holds: corpus/train.de, corpus/train.en"
    )


def test_a_long_listing_stops_at_twenty_names():
    members = {f"f{i:02}": b"x\n" for i in range(25)}
    text = message(formats.archive_member, tar_bytes(members), "g", "big.tar")
    assert text.endswith("It holds: " + ", ".join(f"f{i:02}" for i in range(20)) + " ... and 5 more")


def test_a_directory_is_no_member():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("corpus")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    text = message(formats.archive_member, buffer.getvalue(), "corpus", "dirs.tar")
    assert text.endswith("It holds: no regular files")


def test_data_that_is_no_archive_is_refused_as_such():
    for data in (b"just a line\n" * 100, gzip.compress(b"just a line\n" * 100)):
        text = message(formats.archive_member, data, "train.de", "train.de.gz")
        assert text.startswith("train.de.gz: not a tar or zip archive, plain or compressed (invalid header)")
        assert "holds no 'train.de'" in text


def test_a_corrupt_archive_says_fetch_again():
    tgz = tar_bytes(MEMBERS, "gz")
    assert "corrupt or truncated gzip file" in message(formats.archive_member, tgz[:-30], "m", "c.tgz")
    archive = zip_bytes(MEMBERS)
    text = message(formats.archive_member, archive[: len(archive) // 2], "corpus/train.de", "c.zip")
    assert text.startswith("c.zip: a corrupt or truncated zip archive (") and text.endswith("fetch it again")


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


# --- tsv_pairs --------------------------------------------------------------------------

TSV = b'id\tde\ten\n1\tEin Hund.\tA dog.\r\n2\t"Ja", sagt er.\t"Yes", he says.\n'


def test_tsv_takes_the_columns_asked_for_quotes_and_all():
    assert formats.tsv_pairs(TSV, "p.tsv") == (["id", "1", "2"], ["de", "Ein Hund.", '"Ja", sagt er.'])
    assert formats.tsv_pairs(gzip.compress(TSV), "p.tsv.gz", (2, 1)) == (
        ["en", "A dog.", '"Yes", he says.'],
        ["de", "Ein Hund.", '"Ja", sagt er.'],
    )


def test_tsv_keeps_empty_fields():
    assert formats.tsv_pairs(b"a\t\n\tb\n", "p.tsv") == (["a", ""], ["", "b"])


def test_a_tsv_line_with_another_field_count_names_the_file_and_line():
    data = b"1\ta\tA\n2\tb\tB\n3\tc\tC\textra\n"
    assert message(formats.tsv_pairs, data, "p.tsv") == (
        "p.tsv: line 3 has 4 tab-separated field(s), the first line 3; every line needs the same fields "
        "(a tab inside a sentence shifts them): fix the file"
    )
    assert "p.tsv: line 2 has 1 tab-separated field(s)" in message(formats.tsv_pairs, b"a\tb\n\n", "p.tsv")


def test_a_column_past_the_fields_is_refused():
    assert message(formats.tsv_pairs, b"a\tb\n", "p.tsv", (0, 2)) == (
        "p.tsv: no column 2 (0-based): its first line has 2 tab-separated field(s), columns 0 to 1; "
        "fix the columns"
    )
    assert "no column -1" in message(formats.tsv_pairs, b"a\tb\n", "p.tsv", (-1, 0))
