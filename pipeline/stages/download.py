"""Stage `download`: fetch every source of every split into data/raw, verified and line-aligned.

Output: train.{src,tgt} and val.{src,tgt} (each split's sources concatenated
in order), test/<name>.{src,tgt} (one pair per test set), and manifest.json:
per split and source its name, line count and files (URL or path, archive
member, sha256, how it was verified). UTF-8, LF, one sentence a line. The
directory is written atomically: it is either complete or left as it was.

A split lists names (data.train, data.val, data.test): catalog sets
(pipeline/data/catalog.yaml, every file's sum pinned) or the user's own
data.sources, whose formats pipeline/data/formats.py reads. An empty val or
test list is held out of train (HELDOUT_METHOD). Fetching and the mirror:
pipeline/data/fetch.py; decoding: docs/corpus-decoding.md; sources: docs/corpora.md.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import heapq
import itertools
import os
import random
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click

from pipeline import files
from pipeline.data import artifacts, corpora, formats
from pipeline.data.fetch import Fetched, FetchSpec, fetch, verified_by
from pipeline.errors import ParamsError, UserError
from pipeline.files import SIDES, PairedWriter
from pipeline.params import CorpusSpec, DataParams
from pipeline.stages.options import load_params, params_option

SPLITS = ("train", "val", "test")
HELDOUT = "heldout"  # the name of a split held out of train
HELDOUT_METHOD = (
    "training line i gets key r_i = the i-th draw of random.Random(seed).random(); the heldout_val "
    "lines with the smallest keys are val, the heldout_test lines with the next smallest are test; "
    "every split keeps corpus order"
)

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


# --- the stage -----------------------------------------------------------------


def download(data: DataParams, out: Path) -> dict[str, Any]:
    """Fetch, verify and decode every source `data` names; write `out` atomically; return the manifest.

    Streamed: each file goes a chunk at a time from its (decompressed) source to its split's file.
    A held-out draw needs the train split's length first, so train then goes to a scratch file
    and is split in a second pass (`_hold_out`).
    """
    out = Path(out)
    mirror = resolve_mirror(data)
    plan = plan_sources(data)  # refuses bad names and sources before anything is fetched
    out.parent.mkdir(parents=True, exist_ok=True)
    # params.validate: a split with no sets has its held-out count, one with sets has none.
    held = {"val": data.heldout_val or 0, "test": data.heldout_test or 0}
    with (
        tempfile.TemporaryDirectory(prefix=f".{out.name}.fetch.", dir=out.parent) as scratch,
        files.atomic_path(out) as tmp,
    ):
        (tmp / "test").mkdir(parents=True)
        reader = Reader(Path(scratch), mirror, data.src_lang, data.tgt_lang)
        train_stem = Path(scratch) / "train" if any(held.values()) else tmp / "train"
        splits = {"train": reader.copy_split(plan["train"], train_stem)}
        splits["val"] = reader.copy_split(plan["val"], tmp / "val") if plan["val"] else []
        splits["test"] = [
            reader.copy_split([source], tmp / "test" / source.name)[0] for source in plan["test"]
        ]
        heldout = _hold_out(data, held, train_stem, splits["train"], tmp) if any(held.values()) else None
        parts = heldout.pop("parts", {}) if heldout else {}
        for split in ("val", "test"):
            if held[split]:
                splits[split] = [_heldout_record(held[split], parts.get(split))]
        manifest = {
            "src_lang": data.src_lang,
            "tgt_lang": data.tgt_lang,
            "splits": splits,
            "heldout": heldout,
        }
        files.write_json(tmp / artifacts.MANIFEST, manifest)
    return manifest


def resolve_mirror(data: DataParams) -> Path | None:
    """The mirror root: env CORPUS_MIRROR if set, else data.mirror (relative to the cwd), else None."""
    root = os.environ.get("CORPUS_MIRROR") or data.mirror
    return Path(root) if root else None


# --- planning: names -> sources --------------------------------------------------


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


# --- reading: a source -> line-aligned pairs -------------------------------------


class Reader:
    """Fetches (each file once, however many members are read from it) and copies sources into splits."""

    def __init__(self, scratch: Path, mirror: Path | None, src_lang: str, tgt_lang: str) -> None:
        self.scratch, self.mirror = scratch, mirror
        self.langs = (src_lang, tgt_lang)
        self._fetched: dict[str, Fetched] = {}

    def copy_split(self, sources: list[CorpusPlan], stem: Path) -> list[dict[str, Any]]:
        """Write the sources' pairs, concatenated in order, to STEM.{src,tgt}; their manifest records."""
        with PairedWriter(stem) as out:
            return [self.copy(source, out) for source in sources]

    def copy(self, plan: CorpusPlan, out: PairedWriter) -> dict[str, Any]:
        """Append the source's pairs (capped at max_lines) to `out`; its manifest record."""
        records, skipped = [], 0
        if plan.files[0].role == "both":
            (ref,) = plan.files
            records.append(self._record(ref))
            with self._open(ref) as stream:
                fetched_lines, skipped = _copy_pairs(self._pairs(plan, stream, ref.name), out, plan.max_lines)
            if skipped:
                click.echo(
                    f"{ref.name}: skipped {skipped} translation units lacking {' or '.join(self.langs)}",
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
        record = {
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
        if plan.tokenized:  # only then: a manifest without tokenized sources stays as it was
            record["tokenized"] = plan.tokenized
        return record

    def _pairs(
        self, plan: CorpusPlan, stream: IO[bytes], name: str
    ) -> Iterator[tuple[list[str], list[str], int]]:
        """A one-file source's chunks of (src, tgt, translation units skipped)."""
        if plan.format == "tsv":
            for src, tgt in formats.tsv_chunks(formats.line_chunks(stream, name), name, plan.columns):
                yield src, tgt, 0
        elif plan.format == "tmx":
            yield from formats.tmx_chunks(stream, name, *self.langs)
        else:
            for src, tgt in formats.wmt_xml_chunks(stream, name, *self.langs):
                yield src, tgt, 0

    def _fetch(self, ref: FileRef) -> Fetched:
        location = ref.source.location
        if location not in self._fetched:
            self._fetched[location] = fetch(ref.source, self.scratch, self.mirror)
        return self._fetched[location]

    def _record(self, ref: FileRef) -> dict[str, Any]:
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
                yield formats.open_decompressed(raw, ref.name)
                return
            with formats.open_member(raw, ref.member, ref.source.location) as member:
                yield formats.open_decompressed(member, ref.name)


def _copy_side(chunks: Iterable[list[str]], out: PairedWriter, side: str, cap: int | None) -> int:
    """Write the first `cap` (all if None) lines of `chunks` to one side of `out`; count them all."""
    n = 0
    for lines in chunks:
        out.write_lines(side, lines if cap is None or n + len(lines) <= cap else lines[: max(cap - n, 0)])
        n += len(lines)
    return n


def _copy_pairs(
    chunks: Iterable[tuple[list[str], list[str], int]], out: PairedWriter, cap: int | None
) -> tuple[int, int]:
    """Write the first `cap` pairs of `chunks` to `out`; count the pairs and the units skipped."""
    n, skipped = 0, 0
    for src, tgt, skip in chunks:
        keep = len(src) if cap is None else max(min(len(src), cap - n), 0)
        out.write_lines("src", src[:keep])
        out.write_lines("tgt", tgt[:keep])
        n, skipped = n + len(src), skipped + skip
    return n, skipped


# --- held-out splits ---------------------------------------------------------------


def heldout_indices(n_lines: int, n_val: int, n_test: int, seed: int) -> tuple[list[int], list[int]]:
    """Line numbers (0-based, sorted) held out for val and test, by the method in HELDOUT_METHOD.

    heapq.nsmallest is sorted()[:k], ties in line order as a stable sort gives them, in memory O(k).
    """
    rng = random.Random(seed)
    keyed = ((rng.random(), i) for i in range(n_lines))
    ranked = [i for _, i in heapq.nsmallest(n_val + n_test, keyed)]
    return sorted(ranked[:n_val]), sorted(ranked[n_val : n_val + n_test])


def _hold_out(
    data: DataParams, sizes: dict[str, int], train: Path, train_records: list[dict[str, Any]], out: Path
) -> dict[str, Any]:
    """Split `sizes` lines for val and/or test off the train split at TRAIN.{src,tgt} into `out`.

    Writes out/train, and out/val or out/test/heldout; each train source's record gets its lines
    after the split. Returns the manifest's `heldout` entry.
    """
    missing = [split for split, n in sizes.items() if n]
    n_train, held = sum(r["lines"] for r in train_records), sum(sizes.values())
    if n_train - held < held:
        parts = " + ".join(f"{sizes[s]} (data.heldout_{s})" for s in missing)
        raise UserError(
            f"train has {n_train} lines, too few to hold out {parts} = {held} and keep at least as many "
            f"for training (needs {2 * held}); lower {' / '.join(f'data.heldout_{s}' for s in missing)}, "
            f"or list sets in data.{missing[0]}"
        )
    val_idx, test_idx = heldout_indices(n_train, sizes["val"], sizes["test"], data.heldout_seed)
    where = {**dict.fromkeys(val_idx, "val"), **dict.fromkeys(test_idx, "test")}
    writers = {"train": PairedWriter(out / "train")}
    writers.update({s: PairedWriter(out / ("val" if s == "val" else f"test/{HELDOUT}")) for s in missing})
    try:
        for side in SIDES:
            _split_side(Path(f"{train}.{side}"), side, where, writers)
    finally:
        for writer in writers.values():
            writer.close()
    ends = list(itertools.accumulate(r["lines"] for r in train_records))
    drawn = {split: [0] * len(train_records) for split in missing}  # per held split, lines of each source
    for i in sorted(where):
        k = bisect.bisect_right(ends, i)
        train_records[k]["lines"] -= 1
        drawn[where[i]][k] += 1
    sized = {split: sizes[split] for split in missing}
    heldout = {"splits": missing, "seed": data.heldout_seed, **sized, "method": HELDOUT_METHOD}
    if any(r.get("tokenized") for r in train_records):
        heldout["parts"] = {split: _parts(train_records, n) for split, n in drawn.items()}
    return heldout


def _parts(train_records: list[dict[str, Any]], drawn: list[int]) -> list[dict[str, Any]]:
    """A held split's runs of lines by train source: it keeps corpus order, so each source's are in a row."""
    return [
        {"name": r["name"], "lines": n, "tokenized": r.get("tokenized")}
        for r, n in zip(train_records, drawn)
        if n
    ]


def _split_side(path: Path, side: str, where: dict[int, str], writers: dict[str, PairedWriter]) -> None:
    """Copy one side of the train split, line i to writers[where[i]] (train if i is not held out)."""
    taken = sorted(where)
    start = 0  # the chunk's first line number
    for lines in files.line_chunks(path):
        end = start + len(lines)
        kept, at = [], start
        for i in taken[bisect.bisect_left(taken, start) : bisect.bisect_left(taken, end)]:
            kept += lines[at - start : i - start]
            writers[where[i]].write_lines(side, [lines[i - start]])
            at = i + 1
        writers["train"].write_lines(side, kept + lines[at - start :])
        start = end


def _heldout_record(lines: int, parts: list[dict[str, Any]] | None) -> dict[str, Any]:
    """`parts`: the train sources its lines came from, in order (only where one is tokenized)."""
    record = {"name": HELDOUT, "catalog": False, "lines": lines, "heldout_from": "train", "files": []}
    return {**record, "parts": parts} if parts is not None else record


@click.command("download")
@params_option
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/raw",
    show_default=True,
    help="Output directory: {train,val}.{src,tgt}, test/<name>.{src,tgt} and manifest.json.",
)
def command(params_file: Path, out: Path) -> None:
    """Fetch and verify every source the `data` params name into OUT."""
    manifest = download(load_params(params_file).data, out)
    counts = [
        f"{split} {sum(s['lines'] for s in manifest['splits'][split])}" for split in ("train", "val")
    ] + [f"test {s['name']} {s['lines']}" for s in manifest["splits"]["test"]]
    click.echo(f"wrote {out}: {', '.join(counts)} lines")
