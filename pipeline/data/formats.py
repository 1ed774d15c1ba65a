"""Turning a fetched corpus file into line-aligned text: compression, archives and five formats.

`decompress` undoes gzip, xz or bzip2, known by magic bytes, never by name;
`archive_member` reads one file out of a tar (plain or compressed) or a zip.
The formats (FORMATS; `guess_format` names one from a file name):
- text: `text_lines`, one side per file, under the decoding policy;
- tsv: `tsv_pairs`, two columns of one tab-separated file;
- tmx: `tmx_pairs`, a translation memory (TMX 1.1 to 1.4);
- sgm: `sgm_lines`, one side of a WMT test set before 2021;
- xml: `wmt_xml_pairs`, a WMT test set from 2021 on (both sides in one file).
What each keeps, skips and refuses: docs/corpus-decoding.md. Every problem with
a file is a UserError that names it and says what to do.
"""

from __future__ import annotations

import bz2
import gzip
import html
import io
import lzma
import re
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import NoReturn
from xml.etree import ElementTree as ET

from pipeline.errors import UserError

FORMATS = ("text", "tsv", "tmx", "sgm", "xml")

_FORMAT_SUFFIXES = {".tsv": "tsv", ".tmx": "tmx", ".sgm": "sgm", ".xml": "xml"}
_COMPRESSION_SUFFIXES = (".gz", ".xz", ".bz2")


def guess_format(name: str) -> str:
    """The format a file (or archive member) name suggests, compression suffixes aside: `text` if none."""
    base = name.lower()
    while base.endswith(_COMPRESSION_SUFFIXES):
        base = base.rsplit(".", 1)[0]
    return _FORMAT_SUFFIXES.get(PurePosixPath(base).suffix, "text")


# --- compression and archives ----------------------------------------------------------

# bzip2's "BZh" + block size is followed by a block's magic (pi) or, in an empty stream, the end's
# (sqrt pi): checked too, since "BZh9" alone could start a text file.
_BZIP2_NEXT = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")

_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.decompress,
    "xz": lzma.decompress,
    "bzip2": bz2.decompress,
}


def _compression(data: bytes) -> str | None:
    """gzip, xz or bzip2, from the magic bytes; None for anything else."""
    if data[:2] == b"\x1f\x8b":
        return "gzip"
    if data[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if data[:3] == b"BZh" and data[3:4].isdigit() and data[4:10] in _BZIP2_NEXT:
        return "bzip2"
    return None


def decompress(data: bytes, name: str) -> bytes:
    """`data` with its gzip, xz or bzip2 compression undone (each checks its own length and CRC)."""
    kind = _compression(data)
    if kind is None:
        return data
    try:
        return _DECOMPRESS[kind](data)
    # gzip: OSError, EOFError or zlib.error; xz: LZMAError; bzip2: OSError, or ValueError if truncated
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as e:
        raise UserError(f"{name}: a corrupt or truncated {kind} file ({e}); fetch it again") from e


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first file, or the end record of an empty zip
_LISTED = 20  # member names shown when the one asked for is not there


# Members are read into memory (TarFile.extractfile, ZipFile.read), never extracted to disk, so a
# member named ../x or /etc/x cannot write anywhere: names need no sanitizing.
def archive_member(data: bytes, member: str, name: str) -> bytes:
    """The bytes of the regular file `member` in a tar (plain, gzip, xz or bzip2) or zip archive."""
    if data.startswith(_ZIP_MAGIC):
        return _zip_member(data, member, name)
    return _tar_member(decompress(data, name), member, name)


def _tar_member(data: bytes, member: str, name: str) -> bytes:
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    except tarfile.TarError as e:
        raise UserError(
            f"{name}: not a tar or zip archive, plain or compressed ({e}), so it holds no {member!r}; "
            "name the archive, or give the file no member"
        ) from e
    with tar:
        try:
            files = {info.name: info for info in tar.getmembers() if info.isfile()}  # the last copy wins
            found = tar.extractfile(files[_pick(list(files), member, name)])
            assert found is not None  # a regular file always has a file object
            return found.read()
        except tarfile.TarError as e:
            raise UserError(f"{name}: a corrupt or truncated tar archive ({e}); fetch it again") from e


def _zip_member(data: bytes, member: str, name: str) -> bytes:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [info.filename for info in archive.infolist() if not info.is_dir()]
            picked = _pick(names, member, name)
            try:
                return archive.read(picked)
            except (NotImplementedError, RuntimeError) as e:  # a compression method or an encryption
                raise UserError(
                    f"{name}: cannot read {picked!r} ({e}); unpack the archive with another tool "
                    "and name the file itself"
                ) from e
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, lzma.LZMAError) as e:
        raise UserError(f"{name}: a corrupt or truncated zip archive ({e}); fetch it again") from e


def _pick(names: list[str], member: str, name: str) -> str:
    """The name in `names` that `member` means (a leading ./ on either side ignored)."""
    if member in names:
        return member
    for candidate in names:
        if _bare(candidate) == _bare(member):
            return candidate
    shown = ", ".join(names[:_LISTED]) or "no regular files"
    more = f" ... and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    raise UserError(
        f"{name}: the archive holds no file {member!r}; fix the member name. It holds: {shown}{more}"
    )


def _bare(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path


# --- text and TSV ----------------------------------------------------------------------


def text_lines(data: bytes, name: str) -> list[str]:
    """Lines of a file (compressed or not) under the decoding policy of docs/corpus-decoding.md."""
    data = decompress(data, name)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    # Done on bytes, which is safe: 0x0D and 0x0A never occur inside a UTF-8 multi-byte character.
    data = data.replace(b"\r\n", b"\n")
    if b"\n" not in data:
        data = data.replace(b"\r", b"\n")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(
            f"{name}: invalid UTF-8 at line {line} ({e.reason}); re-encode the file as UTF-8"
        ) from e
    if not text:
        raise UserError(f"{name}: the file is empty (no lines); check the source")
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


def tsv_pairs(data: bytes, name: str, columns: tuple[int, int] = (0, 1)) -> tuple[list[str], list[str]]:
    """Two 0-based columns of a tab-separated file: every line split on every tab, no quoting."""
    lines = text_lines(data, name)
    width = lines[0].count("\t") + 1
    for column in columns:
        if not 0 <= column < width:
            raise UserError(
                f"{name}: no column {column} (0-based): its first line has {width} tab-separated "
                f"field(s), columns 0 to {width - 1}; fix the columns"
            )
    src, tgt = [], []
    for number, line in enumerate(lines, 1):
        fields = line.split("\t")
        if len(fields) != width:
            raise UserError(
                f"{name}: line {number} has {len(fields)} tab-separated field(s), the first line {width}; "
                "every line needs the same fields (a tab inside a sentence shifts them): fix the file"
            )
        src.append(fields[columns[0]])
        tgt.append(fields[columns[1]])
    return src, tgt


# --- markup: SGM, TMX, WMT XML ---------------------------------------------------------

_SEG = re.compile(r"<seg(?:\s[^>]*)?>(.*?)</seg>", re.IGNORECASE)
_SEG_OPEN = re.compile(r"<seg[\s>]", re.IGNORECASE)
_XML_SPACE = re.compile(r"[ \t\r\n]+")


def _one_line(text: str) -> str:
    """A segment on one line: each run of XML white space (a line break too) one space, none at the ends."""
    return _XML_SPACE.sub(" ", text).strip(" ")


def sgm_lines(data: bytes, name: str) -> list[str]:
    """The text of every <seg> of a WMT SGM file, in file order, HTML entities unescaped."""
    # SGM is not always well-formed XML (bare & and <), so it is read a line at a time, as sacrebleu does.
    segs = []
    for number, line in enumerate(text_lines(data, name), 1):
        found = _SEG.findall(line)
        if len(found) != len(_SEG_OPEN.findall(line)):
            raise UserError(f"{name}: line {number}: a <seg> with no </seg> on the same line; fix the file")
        segs += [_one_line(html.unescape(seg)) for seg in found]
    if not segs:
        raise UserError(f"{name}: no <seg> in the file: not an SGM test set; check the source or its format")
    return segs


_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
# TMX's inline codes: their content is the original document's markup (an HTML tag, an RTF code),
# not the sentence's text, and goes, with any <sub> inside it. <hi> and anything else stay.
_CODES = {"bpt", "ept", "it", "ph", "ut"}


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _primary(lang: str) -> str:
    """A language tag's primary subtag, lower case: de-DE, DE and de_AT are all de."""
    return re.split(r"[-_]", lang.strip(), maxsplit=1)[0].lower()


# ElementTree fetches no external entity (it refuses one as undefined) and expat >= 2.4.1 caps entity
# expansion (billion laughs): the Python docs' "XML vulnerabilities" table. So no defusedxml.
def _elements(data: bytes, name: str, tag: str) -> Iterator[ET.Element]:
    """Each complete `tag` element of the XML `data`, dropped from the tree once used (bounded memory)."""
    open_elements: list[ET.Element] = []
    try:
        for event, element in ET.iterparse(io.BytesIO(data), events=("start", "end")):
            if event == "start":
                open_elements.append(element)
                continue
            open_elements.pop()
            if _local(element.tag) == tag:
                yield element
                if open_elements:
                    open_elements[-1].remove(element)
    except ET.ParseError as e:
        line, column = e.position
        reason = str(e).split(": line ", 1)[0]
        raise UserError(
            f"{name}: not well-formed XML at line {line}, column {column + 1} ({reason}); "
            "fetch it again or fix the file"
        ) from e


def _seg_text(element: ET.Element) -> str:
    """A TMX <seg>'s (or <hi>'s) text: its own, its children's but codes', and every child's tail."""
    parts = [element.text or ""]
    for child in element:
        if _local(child.tag) not in _CODES:
            parts.append(_seg_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _tu_segs(tu: ET.Element) -> dict[str, ET.Element]:
    """A <tu>'s <seg> per primary language: the first <tuv> of each language with a <seg>."""
    segs: dict[str, ET.Element] = {}
    for tuv in tu:
        lang = tuv.get(_XML_LANG) or tuv.get("lang")  # TMX 1.4 xml:lang, TMX 1.1 lang
        seg = next((child for child in tuv if _local(child.tag) == "seg"), None)
        if _local(tuv.tag) == "tuv" and lang and seg is not None:
            segs.setdefault(_primary(lang), seg)
    return segs


def tmx_pairs(data: bytes, name: str, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str], int]:
    """The (src, tgt) segments of every <tu> that has both languages, and how many <tu> lacked one."""
    want_src, want_tgt = _primary(src_lang), _primary(tgt_lang)
    src: list[str] = []
    tgt: list[str] = []
    seen: set[str] = set()  # every language met, for the error if none is the pair
    skipped = 0
    for tu in _elements(decompress(data, name), name, "tu"):
        segs = _tu_segs(tu)
        seen.update(segs)
        if want_src in segs and want_tgt in segs:
            src.append(_one_line(_seg_text(segs[want_src])))
            tgt.append(_one_line(_seg_text(segs[want_tgt])))
        else:
            skipped += 1
        tu.clear()
    if not src:
        _refuse_languages(name, "<tu>", src_lang, tgt_lang, seen)
    return src, tgt, skipped


def _refuse_languages(name: str, unit: str, src_lang: str, tgt_lang: str, seen: set[str]) -> NoReturn:
    found = ", ".join(sorted(seen)) or "none"
    raise UserError(
        f"{name}: no {unit} holds both {src_lang} and {tgt_lang} (languages found: {found}); "
        "check data.src_lang and data.tgt_lang, or the file"
    )


def _doc_sides(doc: ET.Element) -> dict[str, dict[str, str]]:
    """A WMT <doc>'s segments by seg id, per primary language: its <src> and each <ref>, first one wins."""
    sides: dict[str, dict[str, str]] = {}
    for side in doc:
        lang = side.get("lang")
        if _local(side.tag) in ("src", "ref") and lang and _primary(lang) not in sides:
            segs = (seg for seg in side.iter() if _local(seg.tag) == "seg")
            sides[_primary(lang)] = {seg.get("id", ""): _one_line("".join(seg.itertext())) for seg in segs}
    return sides


def wmt_xml_pairs(data: bytes, name: str, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str]]:
    """The (src, tgt) segments of a WMT 2021+ XML test set, paired by seg id within each <doc>."""
    want_src, want_tgt = _primary(src_lang), _primary(tgt_lang)
    src: list[str] = []
    tgt: list[str] = []
    seen: set[str] = set()
    for doc in _elements(decompress(data, name), name, "doc"):
        sides = {} if "testsuite" in doc.attrib else _doc_sides(doc)  # test suites have no refs
        seen.update(sides)
        if want_src in sides and want_tgt in sides:
            # in the order of the doc's first side (its <src>), so that either direction gives one order
            first = next(lang for lang in sides if lang in (want_src, want_tgt))
            for seg_id in sides[first]:
                text, other = sides[want_src].get(seg_id), sides[want_tgt].get(seg_id)
                if text and other:  # as sacrebleu: a segment with no reference is no test
                    src.append(text)
                    tgt.append(other)
        doc.clear()
    if not src:
        _refuse_languages(name, "<doc>", src_lang, tgt_lang, seen)
    return src, tgt
