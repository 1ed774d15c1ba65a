"""Planning a download: the names a split lists (catalog sets or data.sources entries) resolved
into the files to fetch, each with the sha256 it must have, before anything is fetched.

A name is refused here, with the closest known names, when neither the catalog
(pipeline/data/catalog.yaml) nor data.sources has it; a data.sources entry whose
shape is wrong is refused with its key.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from pipeline.data import corpora, formats
from pipeline.data.fetch import FetchSpec
from pipeline.errors import ParamsError
from pipeline.files import SIDES
from pipeline.params import CorpusSpec, DataParams

SPLITS = ("train", "val", "test")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class FileRef:
    """One file a source reads: its side (src, tgt, or both), where it is, the archive member if any."""

    role: str
    source: FetchSpec
    member: str | None = None

    @property
    def name(self) -> str:
        """How messages name it: the location, and the member after a colon."""
        return f"{self.source.location}:{self.member}" if self.member else self.source.location


@dataclass(frozen=True)
class CorpusPlan:
    """A named source of one split, resolved from the catalog or data.sources."""

    name: str
    catalog: bool
    format: str  # one of formats.FORMATS
    files: tuple[FileRef, ...]
    columns: tuple[int, int] = (0, 1)
    max_lines: int | None = None
    tokenized: str | None = None  # pipeline.data.detok.TOKENIZERS: clean detokenizes the source


def plan_sources(data: DataParams) -> dict[str, list[CorpusPlan]]:
    """Per split, its sources in order; a name neither in the catalog nor in data.sources is refused."""
    for name in data.sources:
        if name in corpora.SETS:
            raise ParamsError(
                f"data.sources.{name}: the catalog has a set of that name; rename your source "
                f"(or use the catalog's with `catalog: {name}`)"
            )
    return {
        split: [_resolve(name, f"data.{split}[{i}]", data) for i, name in enumerate(getattr(data, split))]
        for split in SPLITS
    }


def _resolve(name: str, key: str, data: DataParams) -> CorpusPlan:
    spec = data.sources.get(name)
    if spec is None:
        return _from_catalog(name, _lookup(name, key, data), key, data, None)
    key = f"data.sources.{name}"
    if spec.catalog is not None:
        return _from_catalog(name, _lookup(spec.catalog, f"{key}.catalog", data), key, data, spec.max_lines)
    return _from_spec(name, spec, key)


def _lookup(name: str, key: str, data: DataParams) -> corpora.NamedSet:
    if name in corpora.SETS:
        return corpora.SETS[name]
    known = [*data.sources, *corpora.SETS]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else "`python -m pipeline corpora` lists the catalog"
    raise ParamsError(f"{key}: no catalog set or data.sources entry named {name!r}; {hint}")


def _from_catalog(
    name: str, named: corpora.NamedSet, key: str, data: DataParams, max_lines: int | None
) -> CorpusPlan:
    for lang, lang_key in ((data.src_lang, "data.src_lang"), (data.tgt_lang, "data.tgt_lang")):
        if lang not in named.langs:
            raise ParamsError(
                f"{key}: catalog set {named.name} has no language {lang!r} ({lang_key}); it has "
                f"{', '.join(named.langs)}; `python -m pipeline corpora --pair "
                f"{data.src_lang}-{data.tgt_lang}` lists the sets of your pair"
            )
    src, tgt = named.oriented(data.src_lang, data.tgt_lang).sides
    # No sum of its own: every catalog URL is in PINNED_SHA256, which fetch() checks.
    refs = tuple(
        FileRef(role, FetchSpec(side.url, key, None), side.member) for role, side in zip(SIDES, (src, tgt))
    )
    return CorpusPlan(name, True, "text", refs, max_lines=max_lines, tokenized=named.tokenized)


def _from_spec(name: str, spec: CorpusSpec, key: str) -> CorpusPlan:
    """A data.sources entry (its shape already checked by params.validate_data)."""
    if spec.archive is not None:
        archive = FetchSpec(spec.archive, f"{key}.archive", _check_sha(spec.sha256, f"{key}.sha256"))
        members = [("both", spec.file)] if spec.file else [("src", spec.src), ("tgt", spec.tgt)]
        refs = tuple(FileRef(role, archive, member) for role, member in members)
        named_by = [m for _, m in members]
    elif spec.file is not None:
        refs = (
            FileRef("both", FetchSpec(spec.file, f"{key}.file", _check_sha(spec.sha256, f"{key}.sha256"))),
        )
        named_by = [spec.file]
    else:
        assert spec.src is not None and spec.tgt is not None
        refs = (
            FileRef(
                "src", FetchSpec(spec.src, f"{key}.src", _check_sha(spec.src_sha256, f"{key}.src_sha256"))
            ),
            FileRef(
                "tgt", FetchSpec(spec.tgt, f"{key}.tgt", _check_sha(spec.tgt_sha256, f"{key}.tgt_sha256"))
            ),
        )
        named_by = [spec.src, spec.tgt]
    fmt: str = spec.format
    if fmt == "auto":
        guessed = {formats.guess_format(str(n)) for n in named_by}
        fmt = guessed.pop() if len(guessed) == 1 else "text"
        one_file = spec.file is not None
        if one_file != (fmt in ("tsv", "tmx", "xml")):
            raise ParamsError(
                f"{key}.format: auto reads {named_by[0]} as {fmt}, which does not fit "
                f"{'file' if one_file else 'src and tgt'}; set format: (text, tsv, tmx, sgm or xml)"
            )
    return CorpusPlan(name, False, fmt, refs, spec.columns, spec.max_lines, spec.tokenized)


def _check_sha(value: str | None, key: str) -> str | None:
    if value is None:
        return None
    value = value.strip().lower()
    if not _SHA256.match(value):
        raise ParamsError(f"{key}: {value!r} is not a sha256 (64 hex digits); fix it or set it to null")
    return value
