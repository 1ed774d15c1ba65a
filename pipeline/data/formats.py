"""Turning an opened corpus file (containers.py undoes its compression and archive) into
line-aligned text, streamed a chunk at a time (memory bounded by CHUNK, not by the file).
The formats (FORMATS; `guess_format` names one from a file name), each as
chunks (`*_chunks`) and, for whole bytes in memory, as lists:
text (`text_lines`: one side per file, under the decoding policy), tsv
(`tsv_pairs`: two columns), tmx (`tmx_pairs`: TMX 1.1 to 1.4), sgm (`sgm_lines`:
one side of a WMT test set before 2021), xml (`wmt_xml_pairs`: WMT 2021 on).
What each keeps, skips and refuses: docs/corpus-decoding.md. Every problem with
a file is a UserError that names it and says what to do.
"""

from __future__ import annotations

import html
import io
import itertools
import re
from collections.abc import Iterable, Iterator
from pathlib import PurePosixPath
from typing import IO, NoReturn
from xml.etree import ElementTree as ET

from pipeline.data.containers import CHUNK, open_decompressed
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


# --- text and TSV ----------------------------------------------------------------------

Pairs = tuple[list[str], list[str]]  # line-aligned (src, tgt) lines: a chunk of a two-sided file


def line_chunks(stream: IO[bytes], name: str) -> Iterator[list[str]]:
    """The lines of a decompressed file under the decoding policy of docs/corpus-decoding.md, in chunks.

    Whether a lone CR ends a line depends on the whole file (it does if the file has no LF), so
    the text is held until the first LF: a file of CR-ended lines only is held whole.
    """
    blocks = iter(lambda: stream.read(CHUNK), b"")
    first = b""
    for block in blocks:
        first += block
        if b"\n" in block:
            break
    if first.startswith(b"\xef\xbb\xbf"):
        first = first[3:]
    if not first:
        raise UserError(f"{name}: the file is empty (no lines); check the source")
    end = b"\n" if b"\n" in first else b"\r"
    carry, done = b"", 0  # the bytes after the last line end; the lines yielded so far
    for block in itertools.chain([first], blocks):
        data = carry + block
        cut = data.rfind(end) + 1
        if cut:
            data, carry = data[:cut], data[cut:]
            lines = _decode_lines(data, end, name, done)
            done += len(lines)
            yield lines
        else:
            carry = data
    if carry:
        yield _decode_lines(carry, end, name, done)


def _decode_lines(data: bytes, end: bytes, name: str, before: int) -> list[str]:
    """Lines of `data` (whole lines, the last without its end only at the end of the file)."""
    # Done on bytes, which is safe: 0x0D and 0x0A never occur inside a UTF-8 multi-byte character.
    data = data.replace(b"\r\n", b"\n") if end == b"\n" else data.replace(b"\r", b"\n")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = before + data.count(b"\n", 0, e.start) + 1
        raise UserError(
            f"{name}: invalid UTF-8 at line {line} ({e.reason}); re-encode the file as UTF-8"
        ) from e
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


def text_lines(data: bytes, name: str) -> list[str]:
    """Lines of a file (compressed or not) under the decoding policy of docs/corpus-decoding.md."""
    stream = open_decompressed(io.BytesIO(data), name)
    return list(itertools.chain.from_iterable(line_chunks(stream, name)))


def tsv_chunks(lines: Iterable[list[str]], name: str, columns: tuple[int, int] = (0, 1)) -> Iterator[Pairs]:
    """Two 0-based columns of a tab-separated file's lines: every line split on every tab, no quoting."""
    width, number = 0, 0
    for chunk in lines:
        if not width:
            width = chunk[0].count("\t") + 1
            for column in columns:
                if not 0 <= column < width:
                    raise UserError(
                        f"{name}: no column {column} (0-based): its first line has {width} tab-separated "
                        f"field(s), columns 0 to {width - 1}; fix the columns"
                    )
        src, tgt = [], []
        for line in chunk:
            number += 1
            fields = line.split("\t")
            if len(fields) != width:
                raise UserError(
                    f"{name}: line {number} has {len(fields)} tab-separated field(s), the first line "
                    f"{width}; every line needs the same fields (a tab inside a sentence shifts them): "
                    "fix the file"
                )
            src.append(fields[columns[0]])
            tgt.append(fields[columns[1]])
        yield src, tgt


def tsv_pairs(data: bytes, name: str, columns: tuple[int, int] = (0, 1)) -> Pairs:
    """Two 0-based columns of a tab-separated file: every line split on every tab, no quoting."""
    return _joined(tsv_chunks([text_lines(data, name)], name, columns))


def _joined(chunks: Iterable[Pairs]) -> Pairs:
    src: list[str] = []
    tgt: list[str] = []
    for s, t in chunks:
        src += s
        tgt += t
    return src, tgt


# --- markup: SGM, TMX, WMT XML ---------------------------------------------------------

_SEG = re.compile(r"<seg(?:\s[^>]*)?>(.*?)</seg>", re.IGNORECASE)
_SEG_OPEN = re.compile(r"<seg[\s>]", re.IGNORECASE)
_XML_SPACE = re.compile(r"[ \t\r\n]+")


def _one_line(text: str) -> str:
    """A segment on one line: each run of XML white space (a line break too) one space, none at the ends."""
    return _XML_SPACE.sub(" ", text).strip(" ")


def sgm_chunks(lines: Iterable[list[str]], name: str) -> Iterator[list[str]]:
    """The text of every <seg> of a WMT SGM file's lines, in file order, HTML entities unescaped."""
    # SGM is not always well-formed XML (bare & and <), so it is read a line at a time, as sacrebleu does.
    number, any_seg = 0, False
    for chunk in lines:
        segs = []
        for line in chunk:
            number += 1
            found = _SEG.findall(line)
            if len(found) != len(_SEG_OPEN.findall(line)):
                raise UserError(
                    f"{name}: line {number}: a <seg> with no </seg> on the same line; fix the file"
                )
            segs += [_one_line(html.unescape(seg)) for seg in found]
        any_seg = any_seg or bool(segs)
        yield segs
    if not any_seg:
        raise UserError(f"{name}: no <seg> in the file: not an SGM test set; check the source or its format")


def sgm_lines(data: bytes, name: str) -> list[str]:
    """The text of every <seg> of a WMT SGM file, in file order, HTML entities unescaped."""
    return list(itertools.chain.from_iterable(sgm_chunks([text_lines(data, name)], name)))


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
def _elements(stream: IO[bytes], name: str, tag: str) -> Iterator[ET.Element]:
    """Each complete `tag` element of the XML `stream`, dropped from the tree once used (bounded memory)."""
    open_elements: list[ET.Element] = []
    try:
        for event, element in ET.iterparse(stream, events=("start", "end")):
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


PAIRS_A_CHUNK = 10_000  # pairs a markup reader yields at a time


def tmx_chunks(
    stream: IO[bytes], name: str, src_lang: str, tgt_lang: str
) -> Iterator[tuple[list[str], list[str], int]]:
    """Chunks of (src, tgt) segments of every <tu> that has both languages, and how many <tu> lacked one."""
    want_src, want_tgt = _primary(src_lang), _primary(tgt_lang)
    src: list[str] = []
    tgt: list[str] = []
    seen: set[str] = set()  # every language met, for the error if none is the pair
    skipped, any_pair = 0, False
    for tu in _elements(stream, name, "tu"):
        segs = _tu_segs(tu)
        seen.update(segs)
        if want_src in segs and want_tgt in segs:
            src.append(_one_line(_seg_text(segs[want_src])))
            tgt.append(_one_line(_seg_text(segs[want_tgt])))
        else:
            skipped += 1
        tu.clear()
        if len(src) == PAIRS_A_CHUNK:
            yield src, tgt, skipped
            src, tgt, skipped, any_pair = [], [], 0, True
    if not (src or any_pair):
        _refuse_languages(name, "<tu>", src_lang, tgt_lang, seen)
    yield src, tgt, skipped


def tmx_pairs(data: bytes, name: str, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str], int]:
    """The (src, tgt) segments of every <tu> that has both languages, and how many <tu> lacked one."""
    chunks = list(tmx_chunks(open_decompressed(io.BytesIO(data), name), name, src_lang, tgt_lang))
    src, tgt = _joined((s, t) for s, t, _ in chunks)
    return src, tgt, sum(skipped for _, _, skipped in chunks)


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


def wmt_xml_chunks(stream: IO[bytes], name: str, src_lang: str, tgt_lang: str) -> Iterator[Pairs]:
    """Chunks (a <doc> each) of the (src, tgt) segments of a WMT 2021+ XML test set, paired by seg id."""
    want_src, want_tgt = _primary(src_lang), _primary(tgt_lang)
    seen: set[str] = set()
    any_pair = False
    for doc in _elements(stream, name, "doc"):
        src: list[str] = []
        tgt: list[str] = []
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
        any_pair = any_pair or bool(src)
        yield src, tgt
    if not any_pair:
        _refuse_languages(name, "<doc>", src_lang, tgt_lang, seen)


def wmt_xml_pairs(data: bytes, name: str, src_lang: str, tgt_lang: str) -> Pairs:
    """The (src, tgt) segments of a WMT 2021+ XML test set, paired by seg id within each <doc>."""
    return _joined(wmt_xml_chunks(open_decompressed(io.BytesIO(data), name), name, src_lang, tgt_lang))
