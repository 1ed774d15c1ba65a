"""Corpora named by the field's own indexes, resolved offline into files to fetch.

    mtdata:OPUS-ccmatrix-v1-eng-msa     mtdata's index (OPUS, statmt/WMT, ParaCrawl, WikiMatrix, ...)
    sacrebleu:wmt20                     sacreBLEU's test sets, the pair from data.src_lang/tgt_lang

Both indexes ship inside their pip packages (mtdata builds a cache of its index
under ~/.mtdata on first use, about 25 s); nothing here asks the network. A name
becomes an IndexedSet: the URLs, archive members (a glob, for OPUS's zips), the
format and the sides, oriented as the pair asks; planning.py turns it into the
same plan as a catalog set, so that fetching, the mirror, checksums (the
index's digest where it has one, else the lock: pipeline/data/lock.py) and
cleaning treat it as any other source.
"""

from __future__ import annotations

import difflib
import functools
import logging
from dataclasses import dataclass
from typing import Any

from pipeline.errors import ParamsError, UserError
from pipeline.params import INDEX_PREFIXES, safe_name

PREFIXES = INDEX_PREFIXES
MTDATA, SACREBLEU = PREFIXES
CLOSE = 3  # matches offered for a name that is not there


@dataclass(frozen=True)
class IndexedFile:
    """One file of a set: its side (src, tgt or both), URL, archive member (may be a glob), md5."""

    role: str
    url: str
    member: str | None = None
    md5: str | None = None  # the index's own digest of the file at url, where it publishes one


@dataclass(frozen=True)
class IndexedSet:
    """A set an index names, oriented src -> tgt."""

    name: str  # as a file and metric name: sacrebleu:wmt21/systems -> sacrebleu-wmt21-systems
    origin: str  # mtdata or sacrebleu: how the set was found (cleaning's defaults differ)
    format: str  # one of formats.FORMATS
    files: tuple[IndexedFile, ...]
    columns: tuple[int, int] = (0, 1)


def is_indexed(name: str) -> bool:
    return name.startswith(PREFIXES)


def resolve(name: str, src: str, tgt: str, key: str) -> IndexedSet:
    """The set `name` (with its prefix) for src -> tgt; refused in one line with the closest names."""
    if name.startswith(MTDATA):
        return _mtdata_set(name.removeprefix(MTDATA), src, tgt, key)
    if name.startswith(SACREBLEU):
        return _sacrebleu_set(name.removeprefix(SACREBLEU), src, tgt, key)
    raise AssertionError(f"{name}: not an indexed name")


# --- mtdata ------------------------------------------------------------------------------------


@functools.cache
def _mtdata_index() -> Any:
    """mtdata's index, quietly (its logger narrates the first build at INFO)."""
    try:
        from mtdata.index import Index
    except ImportError:
        raise UserError("mtdata is not installed; install it with `pip install -e .`") from None
    logging.getLogger("mtdata").setLevel(logging.WARNING)
    return Index.get_instance()


# Macrolanguages whose corpora are also filed under a member language: OPUS and NLLB file Malay as
# Standard Malay (zsm, FLORES-200's zsm_Latn) or Malay (zlm) beside msa. A pair of the macrolanguage
# takes its members' sets, and a member's pair the macrolanguage's.
MACROLANGUAGES = {
    "msa": frozenset({"zsm", "zlm"}),
    "zho": frozenset({"cmn"}),
    "ara": frozenset({"arb"}),
    "fas": frozenset({"pes"}),
    "swa": frozenset({"swh"}),
    "est": frozenset({"ekk"}),
    "lav": frozenset({"lvs"}),
    "nor": frozenset({"nob"}),
    "uzb": frozenset({"uzn"}),
    "aze": frozenset({"azj"}),
    "sqi": frozenset({"als"}),
    "mon": frozenset({"khk"}),
    "nep": frozenset({"npi"}),
    "ori": frozenset({"ory"}),
    "pus": frozenset({"pbt"}),
}


def iso3(lang: str) -> str:
    """Our language code (ISO 639-1, or any BCP 47 tag) as mtdata's (ISO 639-3): en -> eng."""
    from mtdata.iso.bcp47 import bcp47

    return str(bcp47(lang))


def same_language(ours: str, theirs: Any) -> bool:
    """Whether mtdata's language `theirs` (a BCP 47 tag: zsm_Latn, msa_MY) is our ISO 639-3 code
    `ours`, script and region aside, a macrolanguage and its members alike."""
    base = str(getattr(theirs, "lang", theirs)).split("_")[0]
    return base == ours or base in MACROLANGUAGES.get(ours, ()) or ours in MACROLANGUAGES.get(base, ())


def pair_order(langs: Any, src: str, tgt: str) -> tuple[int, int] | None:
    """Which of an entry's two languages is the source and which the target: (0, 1), (1, 0), or
    None where the entry is not of the pair src-tgt (our codes)."""
    if len(langs) != 2:
        return None
    a, b = iso3(src), iso3(tgt)
    if same_language(a, langs[0]) and same_language(b, langs[1]):
        return (0, 1)
    if same_language(a, langs[1]) and same_language(b, langs[0]):
        return (1, 0)
    return None


def mtdata_entries(src: str, tgt: str) -> list[Any]:
    """mtdata's entries of the pair, in either order, sorted by ID."""
    found = [e for did, e in _mtdata_index().entries.items() if pair_order(did.langs, src, tgt) is not None]
    return sorted(found, key=lambda e: str(e.did))


def _mtdata_set(ident: str, src: str, tgt: str, key: str) -> IndexedSet:
    entry = _mtdata_entry(ident, src, tgt, key)
    order = pair_order(entry.did.langs, src, tgt)
    assert order is not None  # _mtdata_entry refuses an entry of another pair
    name = f"{MTDATA}{ident}"
    fmt, files = _mtdata_layout(entry, order, f"{key}: {name}")
    name = safe_name(name)
    columns = tuple(entry.cols) if entry.cols else (0, 1)
    if fmt == "tsv":
        columns = (columns[order[0]], columns[order[1]])
    return IndexedSet(name, "mtdata", fmt, files, (columns[0], columns[1]))


def _mtdata_entry(ident: str, src: str, tgt: str, key: str) -> Any:
    from mtdata.entry import DatasetId

    index = _mtdata_index().entries
    try:
        did = DatasetId.parse(ident)
    except Exception:  # noqa: BLE001 - mtdata raises bare Exception/AssertionError on a malformed ID
        did = None
    entry = index.get(did) if did is not None else None
    pair_ids = [str(e.did) for e in mtdata_entries(src, tgt)]
    if entry is None:
        close = difflib.get_close_matches(ident, pair_ids, n=CLOSE, cutoff=0.4)
        hint = f"closest for {src}-{tgt}: {', '.join(close)}" if close else "none for this pair is close"
        raise ParamsError(
            f"{key}: mtdata has no dataset {ident!r}; {hint} (`python -m pipeline corpora --pair "
            f"{src}-{tgt} --index mtdata` lists them)"
        )
    if pair_order(entry.did.langs, src, tgt) is None:
        same = [i for i in pair_ids if i.rsplit("-", 2)[0] == ident.rsplit("-", 2)[0]]
        hint = f"for {src}-{tgt}: {', '.join(same[:CLOSE])}" if same else f"it has no {src}-{tgt} version"
        raise ParamsError(
            f"{key}: mtdata's {ident} is {entry.did.lang_str}, not {iso3(src)}-{iso3(tgt)} "
            f"(data.src_lang, data.tgt_lang); {hint}"
        )
    return entry


def _mtdata_layout(entry: Any, order: tuple[int, int], what: str) -> tuple[str, tuple[IndexedFile, ...]]:
    """mtdata's (url, ext, in_paths, in_ext) as our format and files, sides in `order`."""
    roles = ("src", "tgt")
    if isinstance(entry.url, (tuple, list)):  # one plain file per side
        urls = list(entry.url)
        return "text", tuple(IndexedFile(r, urls[i]) for r, i in zip(roles, order))
    ext, in_ext, paths = entry.ext, entry.in_ext, entry.in_paths or []
    if ext.startswith("tsv") or (not entry.is_archive and in_ext == "tsv"):
        return "tsv", (IndexedFile("both", entry.url),)
    formats = {"txt": "text", "sgm": "sgm", "tmx": "tmx", "tsv": "tsv", "wmt21xml": "xml"}
    if len(paths) == 2 and paths[0] == paths[1]:  # mtdata 0.5.1's FLORES-101 entries, for one
        raise UserError(
            f"{what}: mtdata's entry names the same file ({paths[0]}) for both sides, a fault of the "
            "index; use another set (FLORES-200: mtdata:Flores-flores200_dev-1-...), or name the files "
            "in data.sources"
        )
    if entry.is_archive and in_ext in formats:
        if len(paths) == 2 and formats[in_ext] in ("text", "sgm"):
            return formats[in_ext], tuple(IndexedFile(r, entry.url, paths[i]) for r, i in zip(roles, order))
        if len(paths) == 1 and formats[in_ext] in ("tmx", "tsv", "xml"):
            return formats[in_ext], (IndexedFile("both", entry.url, paths[0]),)
    if not entry.is_archive and in_ext in (None, "txt") and ext.endswith(("gz", "xz", "txt")):
        raise UserError(f"{what}: one file of one language; give it as a data.sources entry's src or tgt")
    raise UserError(
        f"{what}: its layout ({ext} holding {in_ext}) is not one this pipeline reads (text, TSV, TMX, "
        "SGML or WMT XML); download it with `mtdata get` and name the files in data.sources"
    )


# --- sacreBLEU ---------------------------------------------------------------------------------


def _sacrebleu_datasets() -> dict[str, Any]:
    from sacrebleu.dataset import DATASETS

    return DATASETS


def sacrebleu_sets(src: str, tgt: str) -> list[tuple[str, Any]]:
    """sacreBLEU's sets that have the pair src-tgt, in its order (newest first)."""
    return [(n, d) for n, d in _sacrebleu_datasets().items() if f"{src}-{tgt}" in d.langpairs]


def _sacrebleu_set(set_name: str, src: str, tgt: str, key: str) -> IndexedSet:
    datasets = _sacrebleu_datasets()
    pair = f"{src}-{tgt}"
    name = f"{SACREBLEU}{set_name}"
    if set_name not in datasets:
        close = difflib.get_close_matches(
            set_name, [n for n, _ in sacrebleu_sets(src, tgt)] or datasets, CLOSE
        )
        hint = f"did you mean {', '.join(close)}?" if close else f"`sacrebleu --list -l {pair}` lists them"
        raise ParamsError(f"{key}: sacreBLEU has no test set {set_name!r}; {hint}")
    dataset = datasets[set_name]
    if pair not in dataset.langpairs:
        reverse = f"{tgt}-{src}" in dataset.langpairs
        others = [n for n, _ in sacrebleu_sets(src, tgt)][:CLOSE]
        why = (
            f"it has {tgt}-{src}, whose source side was written in {tgt} (a test set is not reversed)"
            if reverse
            else f"its pairs: {', '.join(sorted(dataset.langpairs))}"
        )
        hint = f"sets with {pair}: {', '.join(others)}" if others else f"sacreBLEU has no set with {pair}"
        raise ParamsError(f"{key}: {name} has no {pair} ({why}); {hint}")
    return IndexedSet(safe_name(name), "sacrebleu", *_sacrebleu_layout(dataset, pair, name))


def _sacrebleu_layout(dataset: Any, pair: str, name: str) -> tuple[str, tuple[IndexedFile, ...]]:
    """The files of `pair`: members of the set's one archive, sides src then the first reference."""
    kind = type(dataset).__name__
    if len(dataset.data) != 1 or kind not in _SACREBLEU_FORMATS:
        raise UserError(
            f"{name}: a {kind} set ({len(dataset.data)} downloads), which this pipeline does not read; "
            f"fetch it with `sacrebleu -t {dataset.name} -l {pair} --echo src` and name the files"
        )
    url, md5 = dataset.data[0], (dataset.md5 or [None])[0]
    paths = dataset.langpairs[pair]
    if isinstance(paths, dict):  # WMT XML: {"path": ..., "refs": [...]}
        paths = [paths["path"]]
    fmt = _SACREBLEU_FORMATS[kind]
    if fmt == "xml" or len(paths) == 1:
        return fmt, (IndexedFile("both", url, paths[0], md5),)
    return fmt, (IndexedFile("src", url, paths[0], md5), IndexedFile("tgt", url, paths[1], md5))


_SACREBLEU_FORMATS = {
    "FakeSGMLDataset": "sgm",
    "IWSLTXMLDataset": "sgm",  # <seg> lines, as SGML
    "PlainTextDataset": "text",
    "WMTXMLDataset": "xml",
}
