"""Planning a download: the names a split lists (catalog sets or data.sources entries) resolved
into the files to fetch, each with the sha256 it must have, before anything is fetched.

A name is refused here, with the closest known names, when neither the catalog
(pipeline/data/catalog.yaml) nor data.sources has it, nor the index it names
(`mtdata:ID`, `sacrebleu:SET`: pipeline/data/indexes.py); a data.sources entry
whose shape is wrong is refused with its key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass

from pipeline.data import corpora, formats, indexes
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
    langs: tuple[str, str] = ("", "")  # (source, target) language: data.src_lang/tgt_lang or its own
    origin: str = ""  # an index it came from (indexes.MTDATA, SACREBLEU without the colon), else ""


def plan_sources(data: DataParams) -> dict[str, list[CorpusPlan]]:
    """Per split, its sources in order; a name neither in the catalog nor in data.sources is refused."""
    for name in data.sources:
        if name in corpora.SETS:
            raise ParamsError(
                f"data.sources.{name}: the catalog has a set of that name; rename your source "
                f"(or use the catalog's with `catalog: {name}`)"
            )
    plan = {
        split: [_resolve(name, f"data.{split}[{i}]", data) for i, name in enumerate(getattr(data, split))]
        for split in SPLITS
    }
    _check_targets(plan, data)
    return plan


def target_languages(plan: dict[str, list[CorpusPlan]]) -> list[str]:
    """The languages the train sources translate into, sorted."""
    return sorted({source.langs[1] for source in plan["train"]})


def tag_languages(
    plan: dict[str, list[CorpusPlan]], parent_tags: list[str], init_from: str | None
) -> list[str]:
    """The target languages whose tags the source lines carry, sorted; [] for none. The train sources'
    targets where there are several; with a parent (train.init_from) whose vocabulary has tags
    (`parent_tags`), every target, even one alone: the child reads its input as its parent learned to."""
    targets = target_languages(plan)
    if not parent_tags:
        return targets if len(targets) > 1 else []
    missing = [lang for lang in targets if lang not in parent_tags]
    if missing:
        raise ParamsError(
            f"train.init_from: {init_from} translates into {', '.join(parent_tags)} (its vocabulary's "
            f"tags), and data's train sources into {', '.join(missing)} too, which it has no tag for; "
            "train on its languages, or start from a parent that has them"
        )
    return targets


def _check_targets(plan: dict[str, list[CorpusPlan]], data: DataParams) -> None:
    """A val or test source must translate into a language the model learns (with tags: has a tag of)."""
    targets = target_languages(plan)
    for split in ("val", "test"):
        for i, source in enumerate(plan[split]):
            if source.langs[1] not in targets:
                raise ParamsError(
                    f"data.{split}[{i}]: {source.name} translates into {source.langs[1]!r}, which no train "
                    f"source does ({', '.join(targets)}), so the model could not be asked for it; set its "
                    f"tgt_lang in data.sources, or add a train source into {source.langs[1]!r}"
                )


def plan_monolingual(name: str, key: str, data: DataParams) -> tuple[CorpusPlan, str]:
    """A source of target-language text (backtranslation.mono): its plan and the side ("src" or
    "tgt") that is in data.tgt_lang. A catalog set or data.sources entry with no such side is refused."""
    want = data.tgt_lang
    spec = data.sources.get(name)
    if spec is None and indexes.is_indexed(name):  # its data.tgt_lang side, of a src-tgt set
        langs = (data.src_lang, want)
        return _from_index(indexes.resolve(name, *langs, key), key, langs), "tgt"
    if spec is None or spec.catalog is not None:
        named = _lookup(name if spec is None else spec.catalog, key, data)  # type: ignore[arg-type]
        if want not in named.langs:
            raise ParamsError(
                f"{key}: {named.name} is {'-'.join(named.langs)}, with no {want!r} side; back-translation "
                f"reads text in data.tgt_lang ({want}): `python -m pipeline corpora` lists the sets with one"
            )
        other = next(lang for lang in named.langs if lang != want)
        max_lines = None if spec is None else spec.max_lines
        return _from_catalog(name, named, key, data, max_lines, (other, want)), "tgt"
    langs = (spec.src_lang or data.src_lang, spec.tgt_lang or data.tgt_lang)
    if want not in langs:
        raise ParamsError(
            f"{key}: data.sources.{name} is {langs[0]}-{langs[1]}, with no {want!r} side; back-translation "
            f"reads text in data.tgt_lang ({want}): set the entry's src_lang or tgt_lang to say which is"
        )
    side = "tgt" if langs[1] == want else "src"
    one = getattr(spec, side)
    if bool(spec.src) ^ bool(spec.tgt):  # text of one side only: read it as both, keep one
        if not one:
            given = "tgt" if spec.tgt else "src"
            lang = langs[SIDES.index(given)]
            raise ParamsError(
                f"{key}: data.sources.{name} gives only its {given} side, text in {lang}, not in "
                f"data.tgt_lang ({want}); give target-language text as `tgt:`"
            )
        sha = getattr(spec, f"{side}_sha256")
        spec = dataclasses.replace(spec, src=one, tgt=one, src_sha256=sha, tgt_sha256=sha)
    plan = dataclasses.replace(_from_spec(name, spec, f"data.sources.{name}"), langs=langs)
    return plan, side


def _resolve(name: str, key: str, data: DataParams) -> CorpusPlan:
    spec = data.sources.get(name)
    if spec is None and indexes.is_indexed(name):
        langs = (data.src_lang, data.tgt_lang)
        return _from_index(indexes.resolve(name, *langs, key), key, langs)
    if spec is None:
        return _from_catalog(name, _lookup(name, key, data), key, data, None, (data.src_lang, data.tgt_lang))
    key = f"data.sources.{name}"
    langs = (spec.src_lang or data.src_lang, spec.tgt_lang or data.tgt_lang)
    if langs[0] == langs[1]:
        raise ParamsError(f"{key}: translates {langs[0]!r} into itself; set its src_lang or tgt_lang")
    if spec.catalog is not None:
        named = _lookup(spec.catalog, f"{key}.catalog", data)
        return _from_catalog(name, named, key, data, spec.max_lines, langs)
    return dataclasses.replace(_from_spec(name, spec, key), langs=langs)


def _lookup(name: str, key: str, data: DataParams) -> corpora.NamedSet:
    if name in corpora.SETS:
        return corpora.SETS[name]
    known = [*data.sources, *corpora.SETS]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else "`python -m pipeline corpora` lists the catalog"
    raise ParamsError(f"{key}: no catalog set or data.sources entry named {name!r}; {hint}")


def _from_catalog(
    name: str,
    named: corpora.NamedSet,
    key: str,
    data: DataParams,
    max_lines: int | None,
    langs: tuple[str, str],
) -> CorpusPlan:
    own = key.startswith("data.sources.")
    for lang, side in zip(langs, ("src_lang", "tgt_lang")):
        if lang not in named.langs:
            where = f"{key}.{side}" if own and getattr(data.sources[name], side) else f"data.{side}"
            raise ParamsError(
                f"{key}: catalog set {named.name} has no language {lang!r} ({where}); it has "
                f"{', '.join(named.langs)}; `python -m pipeline corpora --pair "
                f"{langs[0]}-{langs[1]}` lists the sets of that pair"
            )
    src, tgt = named.oriented(*langs).sides
    # No sum of its own: every catalog URL is in PINNED_SHA256, which fetch() checks.
    refs = tuple(
        FileRef(role, FetchSpec(side.url, key, None), side.member) for role, side in zip(SIDES, (src, tgt))
    )
    return CorpusPlan(name, True, "text", refs, max_lines=max_lines, tokenized=named.tokenized, langs=langs)


def _from_index(named: indexes.IndexedSet, key: str, langs: tuple[str, str]) -> CorpusPlan:
    """A set mtdata or sacreBLEU names: its sha256 checked against corpora.lock, its md5 where the
    index publishes one."""
    refs = tuple(FileRef(f.role, FetchSpec(f.url, key, None, f.md5), f.member) for f in named.files)
    return CorpusPlan(named.name, False, named.format, refs, named.columns, langs=langs, origin=named.origin)


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
