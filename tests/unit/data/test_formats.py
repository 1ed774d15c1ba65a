"""A fetched file into line-aligned text: compression, archives, and the formats text, TSV, TMX, SGM, WMT XML.

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

from pipeline.data import containers, formats
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


# --- guess_format -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("train.de", "text"),
        ("train.de.gz", "text"),
        ("https://example.org/corpus/pairs.tsv", "tsv"),
        ("pairs.TSV.xz", "tsv"),
        ("memory.tmx.gz.bz2", "tmx"),
        ("sgm/newstest2019-deen-src.de.sgm", "sgm"),
        ("test/newstest2021.de-en.xml", "xml"),
        ("corpus.tgz", "text"),
        ("README", "text"),
    ],
)
def test_guess_format_reads_the_suffix_under_any_compression(name, expected):
    assert formats.guess_format(name) == expected
    assert expected in formats.FORMATS


# --- decompress -------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress, bz2.compress])
def test_decompress_knows_gzip_xz_and_bzip2_by_their_bytes_not_their_name(compress):
    data = "ä\nb\n".encode()
    assert containers.decompress(compress(data), "plain.txt") == data


def test_decompress_passes_plain_data_through_even_if_it_starts_like_bzip2():
    for plain in (b"a\nb\n", b"BZh9 is a line\n", b""):
        assert containers.decompress(plain, "f.gz") == plain


@pytest.mark.parametrize(
    ("compress", "kind"), [(gzip.compress, "gzip"), (lzma.compress, "xz"), (bz2.compress, "bzip2")]
)
def test_a_truncated_or_corrupt_stream_names_the_file_and_says_fetch_again(compress, kind):
    data = compress(b"a line\n" * 1000)
    for broken in (data[:-10], data[:20] + b"\x00" * 20 + data[40:]):
        text = message(containers.decompress, broken, "corpus.bin")
        assert text.startswith(f"corpus.bin: a corrupt or truncated {kind} file (")
        assert text.endswith("; fetch it again")


# --- archive_member ---------------------------------------------------------------------

MEMBERS = {"corpus/train.de": b"eins\nzwei\n", "corpus/train.en": b"one\ntwo\n"}


@pytest.mark.parametrize("compression", ["", "gz", "xz", "bz2"])
def test_reads_each_member_of_a_tar_plain_or_compressed(tmp_path, compression):
    path = tmp_path / "corpus.tar"
    path.write_bytes(tar_bytes(MEMBERS, compression))
    for member, data in MEMBERS.items():
        assert containers.archive_member(path.read_bytes(), member, str(path)) == data


def test_reads_a_member_of_a_zip(tmp_path):
    path = tmp_path / "corpus.zip"
    path.write_bytes(zip_bytes(MEMBERS))
    assert containers.archive_member(path.read_bytes(), "corpus/train.en", str(path)) == b"one\ntwo\n"


def test_a_leading_dot_slash_does_not_matter():
    data = tar_bytes({"./corpus/train.de": b"eins\n"}, "gz")
    assert containers.archive_member(data, "corpus/train.de", "c.tgz") == b"eins\n"
    assert containers.archive_member(tar_bytes(MEMBERS), "./corpus/train.de", "c.tar") == b"eins\nzwei\n"


@pytest.mark.parametrize("build", [lambda m: tar_bytes(m, "gz"), zip_bytes])
def test_a_missing_member_lists_the_files_the_archive_holds(build):
    text = message(containers.archive_member, build(MEMBERS), "corpus/train.fr", "corpus.tgz")
    assert text == (
        "corpus.tgz: the archive holds no file 'corpus/train.fr'; fix the member name. "
        "It holds: corpus/train.de, corpus/train.en"
    )


def test_a_long_listing_stops_at_twenty_names():
    members = {f"f{i:02}": b"x\n" for i in range(25)}
    text = message(containers.archive_member, tar_bytes(members), "g", "big.tar")
    assert text.endswith("It holds: " + ", ".join(f"f{i:02}" for i in range(20)) + " ... and 5 more")


def test_a_directory_is_no_member():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("corpus")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    text = message(containers.archive_member, buffer.getvalue(), "corpus", "dirs.tar")
    assert text.endswith("It holds: no regular files")


def test_data_that_is_no_archive_is_refused_as_such():
    for data in (b"just a line\n" * 100, gzip.compress(b"just a line\n" * 100)):
        text = message(containers.archive_member, data, "train.de", "train.de.gz")
        assert text.startswith("train.de.gz: not a tar or zip archive, plain or compressed (invalid header)")
        assert "holds no 'train.de'" in text


def test_a_corrupt_archive_says_fetch_again():
    tgz = tar_bytes(MEMBERS, "gz")
    assert "corrupt or truncated gzip file" in message(containers.archive_member, tgz[:-30], "m", "c.tgz")
    archive = zip_bytes(MEMBERS)
    text = message(containers.archive_member, archive[: len(archive) // 2], "corpus/train.de", "c.zip")
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


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_chunks_of_any_size_read_the_same_lines(monkeypatch, chunk):
    files_ = [
        "\ufeffä\r\nb\r\n\r\nc".encode(),
        b"a\rb\rc\r",
        b"a\rx\nb\r\r\n",
        "x\n\n€y\nz\n".encode(),
    ]
    whole = [formats.text_lines(data, "f") for data in files_]
    monkeypatch.setattr(formats, "CHUNK", chunk)
    for data, lines in zip(files_, whole):
        chunks = list(
            formats.line_chunks(containers.open_decompressed(io.BytesIO(gzip.compress(data)), "f"), "f")
        )
        assert [line for c in chunks for line in c] == lines
    text = message(formats.text_lines, "ok\nü\n".encode() + b"bad \xff byte\nok\n", "a.src")
    assert text == "a.src: invalid UTF-8 at line 3 (invalid start byte); re-encode the file as UTF-8"


def test_a_member_is_read_as_a_stream_of_its_bytes(tmp_path):
    path = tmp_path / "c.tar.xz"
    path.write_bytes(tar_bytes(MEMBERS, "xz"))
    with open(path, "rb") as raw, containers.open_member(raw, "corpus/train.en", str(path)) as found:
        assert found.read(3) == b"one" and found.read() == b"\ntwo\n"


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


# --- tmx_pairs --------------------------------------------------------------------------

TMX = """<?xml version="1.0" encoding="UTF-8"?>
<tmx version="1.4">
  <header srclang="en" datatype="plaintext" segtype="sentence" adminlang="en" o-tmf="x" creationtool="t"
          creationtoolversion="1"/>
  <body>
    <tu tuid="1">
      <prop type="x-domain">news</prop>
      <tuv xml:lang="en-GB"><seg>The <hi>big</hi> dog &amp; the cat.</seg></tuv>
      <tuv xml:lang="DE"><seg>Der <bpt i="1">&lt;b&gt;</bpt>große<ept i="1">&lt;/b&gt;</ept> Hund
          und die Katze.</seg></tuv>
      <tuv xml:lang="fr"><seg>Le grand chien et le chat.</seg></tuv>
    </tu>
    <tu tuid="2">
      <tuv xml:lang="en"><seg>Only English.</seg></tuv>
      <tuv xml:lang="fr"><seg>Seulement français.</seg></tuv>
    </tu>
    <tu tuid="3">
      <note xml:lang="de">A note is no tuv.</note>
      <tuv xml:lang="de_AT"><seg>Click<ph x="1">&lt;img src="a.png"/&gt;</ph>here.</seg></tuv>
      <tuv xml:lang="de-DE"><seg>A second German variant: not taken.</seg></tuv>
      <tuv xml:lang="en-us"><seg>Click <ph x="1"><sub>alt text</sub></ph>here.</seg></tuv>
    </tu>
  </body>
</tmx>
""".encode()


def test_tmx_pairs_two_of_three_languages_either_way_and_counts_the_tu_lacking_one():
    de = ["Der große Hund und die Katze.", "Clickhere."]
    en = ["The big dog & the cat.", "Click here."]
    assert formats.tmx_pairs(TMX, "m.tmx", "de", "en") == (de, en, 1)
    assert formats.tmx_pairs(gzip.compress(TMX), "m.tmx.gz", "EN-gb", "de") == (en, de, 1)
    assert formats.tmx_pairs(TMX, "m.tmx", "en", "fr") == (
        ["The big dog & the cat.", "Only English."],
        ["Le grand chien et le chat.", "Seulement français."],
        1,
    )


def test_tmx_1_1_lang_attribute():
    data = b'<tmx version="1.1"><body><tu><tuv lang="DE-CH"><seg>Hallo</seg></tuv>' + (
        b'<tuv lang="EN"><seg>Hello</seg></tuv></tu></body></tmx>'
    )
    assert formats.tmx_pairs(data, "old.tmx", "de", "en") == (["Hallo"], ["Hello"], 0)


def test_a_tmx_without_the_pair_names_the_languages_it_has():
    assert message(formats.tmx_pairs, TMX, "m.tmx", "de", "cs") == (
        "m.tmx: no <tu> holds both de and cs (languages found: de, en, fr); "
        "check data.src_lang and data.tgt_lang, or the file"
    )


def test_malformed_xml_names_the_file_line_and_column():
    broken = TMX.replace(b'</seg></tuv>\n      <tuv xml:lang="fr">', b'</tuv>\n      <tuv xml:lang="fr">', 1)
    text = message(formats.tmx_pairs, broken, "m.tmx", "de", "en")
    assert text == (
        "m.tmx: not well-formed XML at line 10, column 27 (mismatched tag); fetch it again or fix the file"
    )


def test_an_external_entity_is_refused_not_fetched(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("secret")
    data = (
        f'<!DOCTYPE tmx [<!ENTITY e SYSTEM "file://{secret}">]>'
        '<tmx><body><tu><tuv xml:lang="de"><seg>&e;</seg></tuv><tuv xml:lang="en"><seg>x</seg></tuv></tu>'
        "</body></tmx>"
    ).encode()
    assert "m.tmx: not well-formed XML at line 1" in message(formats.tmx_pairs, data, "m.tmx", "de", "en")


# --- sgm_lines --------------------------------------------------------------------------

SGM = b"""<refset setid="newstest2019" srclang="any" trglang="en">
<doc sysid="ref" docid="abc.1" genre="news" origlang="de">
<p>
<seg id="1">Tom &amp; Jerry say &quot;hi&quot; &#8211; twice.</seg>
<seg id="2"> Spaces  inside\tstay as one. </seg>
</p>
</doc>
<doc sysid="ref" docid="abc.2" genre="news" origlang="de">
<seg id="1">A &lt;b&gt; tag stays text.</seg><seg id="2">Two on one line.</seg>
<seg id="3"></seg>
</doc>
</refset>
"""


def test_sgm_lines_are_the_segs_in_file_order_unescaped():
    assert formats.sgm_lines(SGM, "ref.sgm") == [
        'Tom & Jerry say "hi" – twice.',
        "Spaces inside stay as one.",
        "A <b> tag stays text.",
        "Two on one line.",
        "",
    ]


def test_an_sgm_seg_left_open_names_the_line():
    data = b'<doc>\n<seg id="1">one</seg>\n<seg id="2">two\nlines</seg>\n</doc>\n'
    assert message(formats.sgm_lines, data, "s.sgm") == (
        "s.sgm: line 3: a <seg> with no </seg> on the same line; fix the file"
    )


def test_a_file_with_no_seg_is_no_sgm():
    assert message(formats.sgm_lines, b"plain text\n", "s.sgm").startswith("s.sgm: no <seg> in the file")


# --- wmt_xml_pairs ----------------------------------------------------------------------

WMT_XML = b"""<?xml version='1.0' encoding='utf-8'?>
<dataset id="generaltest2022">
  <collection id="general">
    <doc id="news.1" origlang="de">
      <src lang="de"><p><seg id="1">Erster Satz.</seg><seg id="2">Zweiter
        Satz.</seg></p><p><seg id="3">Ohne Referenz.</seg></p></src>
      <ref lang="en" translator="A"><p><seg id="2">Second sentence.</seg><seg id="1">First sentence.</seg></p>
        <p><seg id="3"></seg></p></ref>
      <ref lang="en" translator="B"><p><seg id="1">The first.</seg><seg id="2">The second.</seg></p>
        <p><seg id="3">Not taken: A is first.</seg></p></ref>
      <hyp lang="en" system="sys"><p><seg id="1">A system's output.</seg></p></hyp>
    </doc>
    <doc id="suite.1" origlang="de" testsuite="x">
      <src lang="de"><p><seg id="1">Testsuite.</seg></p></src>
    </doc>
    <doc id="news.2" origlang="en">
      <src lang="de"><p><seg id="1">Dritter Satz.</seg></p></src>
      <ref lang="en-US" translator="A"><p><seg id="1">Third sentence.</seg></p></ref>
    </doc>
    <doc id="news.3" origlang="de">
      <src lang="de"><p><seg id="1">Kein Englisch.</seg></p></src>
    </doc>
  </collection>
</dataset>
"""


def test_wmt_xml_pairs_segments_by_id_within_each_doc_from_the_first_reference():
    assert formats.wmt_xml_pairs(WMT_XML, "t.xml", "de", "en") == (
        ["Erster Satz.", "Zweiter Satz.", "Dritter Satz."],
        ["First sentence.", "Second sentence.", "Third sentence."],
    )


def test_wmt_xml_read_in_the_reverse_direction():
    assert formats.wmt_xml_pairs(gzip.compress(WMT_XML), "t.xml.gz", "EN", "de") == (
        ["First sentence.", "Second sentence.", "Third sentence."],
        ["Erster Satz.", "Zweiter Satz.", "Dritter Satz."],
    )


def test_wmt_xml_without_the_pair_names_the_languages_it_has():
    assert message(formats.wmt_xml_pairs, WMT_XML, "t.xml", "de", "fr") == (
        "t.xml: no <doc> holds both de and fr (languages found: de, en); "
        "check data.src_lang and data.tgt_lang, or the file"
    )
    assert "t.xml: not well-formed XML at line 1" in message(
        formats.wmt_xml_pairs, b"<dataset", "t.xml", "de", "en"
    )
