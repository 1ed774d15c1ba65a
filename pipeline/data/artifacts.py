"""The data stages' records of what they wrote, as the stages after them read them back.

download writes data/raw/manifest.json, clean data/clean/stats.json and
binarize data/bin/meta.json. Each lists the train split's corpora in the order
their lines come, with a line count: the one thing every later stage needs from
them (clean's filter and bpe's sample share by corpus, binarize records the
counts, training draws by train.source_weights). `Corpus` is that listing, and
`train_corpora` the one way to read it from any of the three, checked against
the lines the split really has. The records' shapes are the TypedDicts below,
which their writers build and their readers get, so that mypy checks both ends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

from pipeline.errors import UserError

MANIFEST = "manifest.json"  # download's, in data/raw
CLEAN_STATS = "stats.json"  # clean's, in data/clean
BIN_META = "meta.json"  # binarize's, in data/bin
REVERSE_OFF = "off.json"  # the reverse stage's whole output while back-translation is off
WHOLE = "train"  # the one corpus of a split whose record lists none


# --- manifest.json ---------------------------------------------------------------------------


class FileRecord(TypedDict):
    """A file a corpus was read from: its side (src, tgt or both), where and how it was fetched."""

    role: str
    source: str  # the URL or path as the params gave it
    member: str | None  # the archive member read, if any
    via: str  # where the bytes came from: the mirror, the network, or the path
    sha256: str
    verified: str | None  # by whose sum: params, pinned, both; None: by none


class _CorpusRecord(TypedDict):
    name: str
    catalog: bool
    lines: int
    files: list[FileRecord]


class CorpusRecord(_CorpusRecord, total=False):
    """A corpus of a split as download wrote it (a held-out split: heldout_from, and parts where a
    train corpus it draws from ships tokenized)."""

    fetched_lines: int
    max_lines: int | None
    format: str
    tmx_units_skipped: int
    tokenized: str
    src_lang: str  # with target-language tags: the source's pair
    tgt_lang: str
    heldout_from: str
    parts: list[dict[str, Any]]
    origin: str  # the index that named it (mtdata, sacrebleu): clean's rules for web data follow it


class Manifest(TypedDict, total=False):
    """data/raw/manifest.json; {} for a raw directory of the user's own."""

    src_lang: str
    tgt_lang: str
    tags: list[str]  # the target-language tags source lines carry, when the train targets are several
    splits: dict[str, list[CorpusRecord]]  # train, val, test
    heldout: dict[str, Any] | None  # how val and test were drawn from train, if they were


# --- stats.json --------------------------------------------------------------------------------


class _SplitCounts(TypedDict):
    lines_in: int
    lines_out: int
    dropped: dict[str, int]  # per reason (train only; zeros elsewhere)
    normalized: dict[str, dict[str, int]]  # per side, the lines each normalization step changed


class SplitCounts(_SplitCounts, total=False):
    """A split's counts in clean's stats.json."""

    detokenized: dict[str, int]  # per side, where a corpus ships tokenized
    sources: dict[str, dict[str, Any]]  # train: per corpus, lines_in, lines_out and dropped


class _CleanStats(TypedDict):
    train: SplitCounts
    val: SplitCounts
    test: dict[str, SplitCounts]  # per test set
    unicode_version: str  # NFC and the character categories depend on it


class ScoreRecord(TypedDict):
    """What the score rule scored with (each model's directory and the sha256 of its model.pt) and
    what it dropped: of the `scored` pairs, `dropped`; the highest score of a pair kept."""

    forward: str
    forward_sha256: str
    reverse: str | None
    reverse_sha256: str | None
    relative: bool  # clean.score.relative
    scored: int
    dropped: int
    highest_kept: float | None


class CleanStats(_CleanStats, total=False):
    """data/clean/stats.json."""

    tags: list[str]  # the manifest's target-language tags, for bpe to make pieces of
    score: ScoreRecord  # where a train source has the score rule


# --- meta.json ---------------------------------------------------------------------------------


class _BinMeta(TypedDict):
    dtype: str  # of the token ids
    joint: bool
    src_vocab_size: int
    tgt_vocab_size: int
    bpe_models: dict[str, str]  # file name -> sha256
    splits: dict[str, dict[str, int]]  # per split: sentences, per side tokens, max_len, unk
    shards: dict[str, list[dict[str, int]]]  # per split, its shards' sentences


class BinMeta(_BinMeta, total=False):
    """data/bin/meta.json."""

    sources: list[dict[str, Any]]  # the train corpora, as Corpus.to_dict writes them


# --- the train corpora --------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """A train corpus and its lines in the split."""

    name: str
    lines: int
    pair: str | None = None  # "en-id": where train sources of several pairs are (target-language tags)

    def to_dict(self) -> dict[str, Any]:
        """As meta.json lists it."""
        return {"name": self.name, "sentences": self.lines} | ({"pair": self.pair} if self.pair else {})


WRITTEN_BY = {MANIFEST: "download", CLEAN_STATS: "clean", BIN_META: "binarize"}


def read_record(path: Path) -> dict[str, Any] | None:
    """A stage's JSON record, or None if there is none; a record that is not a JSON object is an
    error that names the stage to rerun."""
    if not path.is_file():
        return None
    stage = WRITTEN_BY.get(path.name)
    rerun = (
        f"rerun the {stage} stage (dvc repro -f {stage})" if stage else "run the stage that writes it again"
    )
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise UserError(f"{path}: not JSON ({e}); {rerun}") from e
    if not isinstance(found, dict):
        raise UserError(f"{path}: a JSON object was expected; {rerun}")
    return found


def manifest(raw_dir: Path) -> Manifest:
    """data/raw/manifest.json ({} without one: a raw directory of the user's own)."""
    return cast(Manifest, read_record(raw_dir / MANIFEST) or {})


def listed_corpora(record: Path) -> list[Corpus]:
    """The train corpora that a manifest.json, stats.json or meta.json lists ([] if it is missing)."""
    found = read_record(record)
    return _LISTINGS[record.name](found) if found is not None else []


def check_lines(record: Path, corpora: list[Corpus], n_lines: int, lines_file: Path, rerun: str) -> None:
    """Refuse a record whose corpora do not add up to the `n_lines` of `lines_file`; say to run `rerun`."""
    counted = sum(c.lines for c in corpora)
    if corpora and counted != n_lines:
        raise UserError(
            f"{record} counts {counted} training lines but {lines_file} has {n_lines}; run the {rerun} "
            "stage again"
        )


def train_corpora(record: Path, n_lines: int, lines_file: Path, rerun: str) -> list[Corpus]:
    """The corpora `record` lists, checked against the `n_lines` of `lines_file`; one corpus (WHOLE)
    when it lists none."""
    corpora = listed_corpora(record)
    check_lines(record, corpora, n_lines, lines_file, rerun)
    return corpora or [Corpus(WHOLE, n_lines)]


def _manifest_corpora(record: dict[str, Any]) -> list[Corpus]:
    train = (record.get("splits") or {}).get("train") or []
    pair = lambda s: f"{s['src_lang']}-{s['tgt_lang']}" if "tgt_lang" in s else None
    return [Corpus(str(s["name"]), int(s["lines"]), pair(s)) for s in train]


def _stats_corpora(record: dict[str, Any]) -> list[Corpus]:
    corpora = (record.get("train") or {}).get("sources") or {}
    return [Corpus(str(name), int(s["lines_out"]), s.get("pair")) for name, s in corpora.items()]


def _meta_corpora(record: dict[str, Any]) -> list[Corpus]:
    return [Corpus(str(s["name"]), int(s["sentences"]), s.get("pair")) for s in record.get("sources") or []]


_LISTINGS = {MANIFEST: _manifest_corpora, CLEAN_STATS: _stats_corpora, BIN_META: _meta_corpora}
