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
import difflib
import itertools
import os
import random
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from pipeline import files
from pipeline.data import corpora, formats
from pipeline.data.fetch import Fetched, Source, fetch, verified_by
from pipeline.errors import ParamsError, UserError
from pipeline.params import DataParams, SourceSpec
from pipeline.stages.options import load_params, params_option

SPLITS = ("train", "val", "test")
SIDES = ("src", "tgt")
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
    source: Source
    member: str | None = None

    @property
    def name(self) -> str:
        """How messages name it: the location, and the member after a colon."""
        return f"{self.source.location}:{self.member}" if self.member else self.source.location


@dataclass(frozen=True)
class SourcePlan:
    """A named source of one split, resolved from the catalog or data.sources."""

    name: str
    catalog: bool
    format: str  # one of formats.FORMATS
    files: tuple[FileRef, ...]
    columns: tuple[int, int] = (0, 1)
    max_lines: int | None = None


@dataclass
class Pairs:
    """A source's (or split's) line-aligned sides."""

    src: list[str]
    tgt: list[str]


# --- the stage -----------------------------------------------------------------


def download(data: DataParams, out: Path) -> dict[str, Any]:
    """Fetch, verify and decode every source `data` names; write `out` atomically; return the manifest."""
    out = Path(out)
    mirror = resolve_mirror(data)
    plan = plan_sources(data)  # refuses bad names and sources before anything is fetched
    out.parent.mkdir(parents=True, exist_ok=True)
    read: dict[str, list[tuple[Pairs, dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.fetch.", dir=out.parent) as scratch:
        reader = Reader(Path(scratch), mirror, data.src_lang, data.tgt_lang)
        for split, sources in plan.items():
            read[split] = [reader.read(source) for source in sources]
    splits = {split: [record for _, record in sources] for split, sources in read.items()}
    train = _concat([pairs for pairs, _ in read["train"]])
    val = _concat([pairs for pairs, _ in read["val"]]) if read["val"] else None
    tests = {record["name"]: pairs for pairs, record in read["test"]}
    heldout = _hold_out(data, train, splits["train"], val, tests)
    held: dict[str, Pairs] = heldout["pairs"] if heldout else {}
    if val is None:
        val = held["val"]
        splits["val"] = [_heldout_record(len(val.src))]
    if not tests:
        tests = {HELDOUT: held["test"]}
        splits["test"] = [_heldout_record(len(tests[HELDOUT].src))]
    manifest = {
        "src_lang": data.src_lang,
        "tgt_lang": data.tgt_lang,
        "splits": splits,
        "heldout": {k: v for k, v in heldout.items() if k != "pairs"} if heldout else None,
    }
    with files.atomic_path(out) as tmp:
        (tmp / "test").mkdir(parents=True)
        for stem, pairs in [("train", train), ("val", val), *((f"test/{n}", p) for n, p in tests.items())]:
            files.write_lines(tmp / f"{stem}.src", pairs.src)
            files.write_lines(tmp / f"{stem}.tgt", pairs.tgt)
        files.write_json(tmp / "manifest.json", manifest)
    return manifest


def resolve_mirror(data: DataParams) -> Path | None:
    """The mirror root: env CORPUS_MIRROR if set, else data.mirror (relative to the cwd), else None."""
    root = os.environ.get("CORPUS_MIRROR") or data.mirror
    return Path(root) if root else None


# --- planning: names -> sources --------------------------------------------------


def plan_sources(data: DataParams) -> dict[str, list[SourcePlan]]:
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


def _resolve(name: str, key: str, data: DataParams) -> SourcePlan:
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
) -> SourcePlan:
    for lang, lang_key in ((data.src_lang, "data.src_lang"), (data.tgt_lang, "data.tgt_lang")):
        if lang not in named.langs:
            raise ParamsError(
                f"{key}: catalog set {named.name} has no language {lang!r} ({lang_key}); it has "
                f"{', '.join(named.langs)}; `python -m pipeline corpora --pair "
                f"{data.src_lang}-{data.tgt_lang}` lists the sets of your pair"
            )
    src, tgt = named.oriented(data.src_lang, data.tgt_lang).sides
    # No sum of its own: every catalog URL is in PINNED_SHA256, which fetch() checks.
    refs = (FileRef("src", Source(src.url, key, None)), FileRef("tgt", Source(tgt.url, key, None)))
    return SourcePlan(name, True, "text", refs, max_lines=max_lines)


def _from_spec(name: str, spec: SourceSpec, key: str) -> SourcePlan:
    """A data.sources entry (its shape already checked by params.validate_data)."""
    if spec.archive is not None:
        archive = Source(spec.archive, f"{key}.archive", _check_sha(spec.sha256, f"{key}.sha256"))
        members = [("both", spec.file)] if spec.file else [("src", spec.src), ("tgt", spec.tgt)]
        refs = tuple(FileRef(role, archive, member) for role, member in members)
        named_by = [m for _, m in members]
    elif spec.file is not None:
        refs = (FileRef("both", Source(spec.file, f"{key}.file", _check_sha(spec.sha256, f"{key}.sha256"))),)
        named_by = [spec.file]
    else:
        assert spec.src is not None and spec.tgt is not None
        refs = (
            FileRef("src", Source(spec.src, f"{key}.src", _check_sha(spec.src_sha256, f"{key}.src_sha256"))),
            FileRef("tgt", Source(spec.tgt, f"{key}.tgt", _check_sha(spec.tgt_sha256, f"{key}.tgt_sha256"))),
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
    return SourcePlan(name, False, fmt, refs, spec.columns, spec.max_lines)


def _check_sha(value: str | None, key: str) -> str | None:
    if value is None:
        return None
    value = value.strip().lower()
    if not _SHA256.match(value):
        raise ParamsError(f"{key}: {value!r} is not a sha256 (64 hex digits); fix it or set it to null")
    return value


# --- reading: a source -> line-aligned pairs -------------------------------------


class Reader:
    """Fetches (each file once, however many members are read from it) and parses sources."""

    def __init__(self, scratch: Path, mirror: Path | None, src_lang: str, tgt_lang: str) -> None:
        self.scratch, self.mirror = scratch, mirror
        self.langs = (src_lang, tgt_lang)
        self._fetched: dict[str, Fetched] = {}

    def read(self, plan: SourcePlan) -> tuple[Pairs, dict[str, Any]]:
        """The source's pairs (capped at max_lines) and its manifest record."""
        parsed: dict[str, list[str]] = {}
        records, skipped = [], 0
        for ref in plan.files:
            data, record = self._bytes(ref)
            records.append(record)
            if ref.role == "both":
                parsed["src"], parsed["tgt"], skipped = self._parse_both(plan, data, ref.name)
            elif plan.format == "sgm":
                parsed[ref.role] = formats.sgm_lines(data, ref.name)
            else:
                parsed[ref.role] = formats.text_lines(data, ref.name)
        src, tgt = parsed["src"], parsed["tgt"]
        if len(src) != len(tgt):
            names = [ref.name for ref in plan.files]
            where = f"{names[0]} has {len(src)} lines but {names[1]} has {len(tgt)}"
            if len(names) == 1:
                where = f"{names[0]} gave {len(src)} source but {len(tgt)} target lines"
            raise UserError(
                f"source {plan.name}: {where}; the two sides must be line-aligned: "
                "check that they belong together"
            )
        fetched_lines = len(src)
        if plan.max_lines is not None:
            src, tgt = src[: plan.max_lines], tgt[: plan.max_lines]
        capped = f" (first {len(src)} of {fetched_lines})" if len(src) < fetched_lines else ""
        click.echo(f"{plan.name}: {len(src)} pairs{capped}", err=True)
        record = {
            "name": plan.name,
            "catalog": plan.catalog,
            "lines": len(src),
            "fetched_lines": fetched_lines,
            "max_lines": plan.max_lines,
            "format": plan.format,
            "files": records,
        }
        if plan.format == "tmx":
            record["tmx_units_skipped"] = skipped
        return Pairs(src, tgt), record

    def _parse_both(self, plan: SourcePlan, data: bytes, name: str) -> tuple[list[str], list[str], int]:
        if plan.format == "tsv":
            return (*formats.tsv_pairs(data, name, plan.columns), 0)
        if plan.format == "tmx":
            src, tgt, skipped = formats.tmx_pairs(data, name, *self.langs)
            if skipped:
                click.echo(
                    f"{name}: skipped {skipped} translation units lacking {' or '.join(self.langs)}", err=True
                )
            return src, tgt, skipped
        return (*formats.wmt_xml_pairs(data, name, *self.langs), 0)

    def _bytes(self, ref: FileRef) -> tuple[bytes, dict[str, Any]]:
        """The file's bytes, decompressed (the member's, for an archive), and its manifest record."""
        location = ref.source.location
        if location not in self._fetched:
            self._fetched[location] = fetch(ref.source, self.scratch, self.mirror)
        fetched = self._fetched[location]
        data = fetched.path.read_bytes()
        if ref.member is not None:
            data = formats.archive_member(data, ref.member, location)
        record = {
            "role": ref.role,
            "source": location,
            "member": ref.member,
            "via": fetched.via,
            "sha256": fetched.sha256,
            "verified": verified_by(ref.source),
        }
        return formats.decompress(data, ref.name), record


def _concat(parts: list[Pairs]) -> Pairs:
    return Pairs(
        list(itertools.chain.from_iterable(p.src for p in parts)),
        list(itertools.chain.from_iterable(p.tgt for p in parts)),
    )


# --- held-out splits ---------------------------------------------------------------


def heldout_indices(n_lines: int, n_val: int, n_test: int, seed: int) -> tuple[list[int], list[int]]:
    """Line numbers (0-based, sorted) held out for val and test, by the method in HELDOUT_METHOD."""
    rng = random.Random(seed)
    keys = [rng.random() for _ in range(n_lines)]
    ranked = sorted(range(n_lines), key=keys.__getitem__)
    return sorted(ranked[:n_val]), sorted(ranked[n_val : n_val + n_test])


def _hold_out(
    data: DataParams,
    train: Pairs,
    train_records: list[dict[str, Any]],
    val: Pairs | None,
    tests: dict[str, Pairs],
) -> dict[str, Any] | None:
    """Split val and/or test off `train` (in place) where the params list none; None when both are given.

    Each train source's record gets its lines after the split; the returned dict is the
    manifest's `heldout` entry plus `pairs`, the held-out Pairs by split.
    """
    sizes = {"val": data.heldout_val if val is None else 0, "test": 0 if tests else data.heldout_test}
    missing = [split for split, n in sizes.items() if n]
    if not missing:
        return None
    n_train, held = len(train.src), sum(sizes.values())
    if n_train - held < held:
        parts = " + ".join(f"{sizes[s]} (data.heldout_{s})" for s in missing)
        raise UserError(
            f"train has {n_train} lines, too few to hold out {parts} = {held} and keep at least as many "
            f"for training (needs {2 * held}); lower {' / '.join(f'data.heldout_{s}' for s in missing)}, "
            f"or list sets in data.{missing[0]}"
        )
    val_idx, test_idx = heldout_indices(n_train, sizes["val"], sizes["test"], data.heldout_seed)
    taken = set(val_idx) | set(test_idx)
    pairs = {
        split: Pairs([train.src[i] for i in idx], [train.tgt[i] for i in idx])
        for split, idx in (("val", val_idx), ("test", test_idx))
        if split in missing
    }
    ends = list(itertools.accumulate(r["lines"] for r in train_records))
    for i in sorted(taken):
        train_records[bisect.bisect_right(ends, i)]["lines"] -= 1
    keep = [i for i in range(n_train) if i not in taken]
    train.src, train.tgt = [train.src[i] for i in keep], [train.tgt[i] for i in keep]
    sized = {split: sizes[split] for split in missing}
    return {"splits": missing, "seed": data.heldout_seed, **sized, "method": HELDOUT_METHOD, "pairs": pairs}


def _heldout_record(lines: int) -> dict[str, Any]:
    return {"name": HELDOUT, "catalog": False, "lines": lines, "heldout_from": "train", "files": []}


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
