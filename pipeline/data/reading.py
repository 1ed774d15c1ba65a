"""Reading a planned source into a split: fetch its files (each once), decode them into
line-aligned pairs and append them, capped at max_lines, to the split's two files.

Formats: pipeline/data/formats.py; fetching and the mirror: pipeline/data/fetch.py;
decoding: docs/corpus-decoding.md. Each source's manifest record comes back.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

import click

from pipeline.data import containers, formats, tags
from pipeline.data.artifacts import CorpusRecord, FileRecord
from pipeline.data.fetch import Fetched, Mirror, fetch, verified_by
from pipeline.data.planning import CorpusPlan, FileRef
from pipeline.errors import UserError
from pipeline.files import PairedWriter
from pipeline.params import DataParams


def resolve_mirror(data: DataParams) -> Mirror | None:
    """The mirror: env CORPUS_MIRROR if set, else data.mirror; a folder (relative to the cwd) or the
    http(s) URL of a server laid out as one; None if neither is set."""
    root = os.environ.get("CORPUS_MIRROR") or data.mirror
    if not root:
        return None
    return root.rstrip("/") if re.match(r"^https?://", root, re.IGNORECASE) else Path(root)


class Reader:
    """Fetches (each file once, however many members are read from it) and copies sources into splits."""

    def __init__(self, scratch: Path, mirror: Mirror | None, tagged: bool = False) -> None:
        """`tagged`: each source line goes behind its source's target-language tag (pipeline.data.tags)."""
        self.scratch, self.mirror, self.tagged = scratch, mirror, tagged
        self._fetched: dict[str, Fetched] = {}

    def copy_split(self, sources: list[CorpusPlan], stem: Path) -> list[CorpusRecord]:
        """Write the sources' pairs, concatenated in order, to STEM.{src,tgt}; their manifest records."""
        with PairedWriter(stem) as out:
            return [self.copy(source, out) for source in sources]

    def copy(self, plan: CorpusPlan, out: PairedWriter | _Tagging) -> CorpusRecord:
        """Append the source's pairs (capped at max_lines) to `out`; its manifest record."""
        if self.tagged and isinstance(out, PairedWriter):
            out = _Tagging(out, plan.langs[1])
        records, skipped = [], 0
        if plan.files[0].role == "both":
            (ref,) = plan.files
            records.append(self._record(ref))
            with self._open(ref) as stream:
                fetched_lines, skipped = _copy_pairs(self._pairs(plan, stream, ref.name), out, plan.max_lines)
            if skipped:
                click.echo(
                    f"{ref.name}: skipped {skipped} translation units lacking {' or '.join(plan.langs)}",
                    err=True,
                )
        else:
            counts = []
            for ref in plan.files:
                records.append(self._record(ref))
                with self._open(ref) as stream:
                    chunks = formats.line_chunks(stream, ref.name)
                    if plan.format == "sgm":
                        chunks = formats.sgm_chunks(chunks, ref.name)
                    counts.append(_copy_side(chunks, out, ref.role, plan.max_lines))
            if counts[0] != counts[1]:
                names = [ref.name for ref in plan.files]
                raise UserError(
                    f"source {plan.name}: {names[0]} has {counts[0]} lines but {names[1]} has {counts[1]}; "
                    "the two sides must be line-aligned: check that they belong together"
                )
            fetched_lines = counts[0]
        lines = fetched_lines if plan.max_lines is None else min(fetched_lines, plan.max_lines)
        capped = f" (first {lines} of {fetched_lines})" if lines < fetched_lines else ""
        click.echo(f"{plan.name}: {lines} pairs{capped}", err=True)
        record: CorpusRecord = {
            "name": plan.name,
            "catalog": plan.catalog,
            "lines": lines,
            "fetched_lines": fetched_lines,
            "max_lines": plan.max_lines,
            "format": plan.format,
            "files": records,
        }
        if plan.format == "tmx":
            record["tmx_units_skipped"] = skipped
        if plan.origin:  # only then: a manifest of the catalog's and the user's sets stays as it was
            record["origin"] = plan.origin
        if plan.tokenized:  # only then: a manifest without tokenized sources stays as it was
            record["tokenized"] = plan.tokenized
        if self.tagged:  # likewise: a one-pair manifest stays as it was
            record["src_lang"], record["tgt_lang"] = plan.langs
        return record

    def _pairs(
        self, plan: CorpusPlan, stream: IO[bytes], name: str
    ) -> Iterator[tuple[list[str], list[str], int]]:
        """A one-file source's chunks of (src, tgt, translation units skipped)."""
        if plan.format == "tsv":
            for src, tgt in formats.tsv_chunks(formats.line_chunks(stream, name), name, plan.columns):
                yield src, tgt, 0
        elif plan.format == "tmx":
            yield from formats.tmx_chunks(stream, name, *plan.langs)
        else:
            for src, tgt in formats.wmt_xml_chunks(stream, name, *plan.langs):
                yield src, tgt, 0

    def _fetch(self, ref: FileRef) -> Fetched:
        location = ref.source.location
        if location not in self._fetched:
            self._fetched[location] = fetch(ref.source, self.scratch, self.mirror)
        return self._fetched[location]

    def _record(self, ref: FileRef) -> FileRecord:
        """The file's manifest record (fetching it first)."""
        fetched = self._fetch(ref)
        return {
            "role": ref.role,
            "source": ref.source.location,
            "member": ref.member,
            "via": fetched.via,
            "sha256": fetched.sha256,
            "verified": verified_by(ref.source),
        }

    @contextlib.contextmanager
    def _open(self, ref: FileRef) -> Iterator[IO[bytes]]:
        """The file's bytes (the member's, for an archive) as a decompressed stream."""
        with open(self._fetch(ref).path, "rb") as raw:
            if ref.member is None:
                yield containers.open_decompressed(raw, ref.name)
                return
            with containers.open_member(raw, ref.member, ref.source.location) as member:
                yield containers.open_decompressed(member, ref.name)


class _Tagging:
    """A PairedWriter whose source lines go behind a target-language tag."""

    def __init__(self, out: PairedWriter, lang: str) -> None:
        self.out, self.lang = out, lang

    def write_lines(self, side: str, lines: list[str]) -> None:
        self.out.write_lines(side, tags.tagged_lines(lines, self.lang) if side == "src" else lines)


def _copy_side(chunks: Iterable[list[str]], out: PairedWriter | _Tagging, side: str, cap: int | None) -> int:
    """Write the first `cap` (all if None) lines of `chunks` to one side of `out`; count them all."""
    n = 0
    for lines in chunks:
        out.write_lines(side, lines if cap is None or n + len(lines) <= cap else lines[: max(cap - n, 0)])
        n += len(lines)
    return n


def _copy_pairs(
    chunks: Iterable[tuple[list[str], list[str], int]], out: PairedWriter | _Tagging, cap: int | None
) -> tuple[int, int]:
    """Write the first `cap` pairs of `chunks` to `out`; count the pairs and the units skipped."""
    n, skipped = 0, 0
    for src, tgt, skip in chunks:
        keep = len(src) if cap is None else max(min(len(src), cap - n), 0)
        out.write_lines("src", src[:keep])
        out.write_lines("tgt", tgt[:keep])
        n, skipped = n + len(src), skipped + skip
    return n, skipped
