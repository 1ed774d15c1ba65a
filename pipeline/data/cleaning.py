"""Cleaning: every line of every split normalized; training pairs filtered, and only they.

Normalization is pipeline.data.text.normalize, after pipeline.data.detok for the lines of a
source the download manifest marks tokenized. Training pairs are dropped by the first rule that
applies: empty, too_long (clean.max_words), ratio (clean.max_ratio), the rules for web data that
apply to the pair's source (pipeline.data.filters; docs/cleaning.md), heldout_overlap
(clean.decontaminate: a side is a line of a val or test set), duplicate (clean.dedupe). Val and
test sets are never filtered, so scores stay comparable with published ones.

Streamed in chunks of CHUNK_PAIRS pairs through data.workers processes, taken in order, so the
output is the same for any number of workers. Dedupe and decontamination compare 64-bit blake2b
hashes (collision odds: docs/corpora.md); dedupe spills them to disk, so memory stays flat.
stats.json: per split (test: per set) lines in and out, dropped per reason, per side the lines
each normalization step (and detokenization) changed; train also per source.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.data import filters
from pipeline.data.artifacts import Manifest, SplitCounts
from pipeline.data.detok import detokenize_lines
from pipeline.data.tags import split_tags
from pipeline.data.text import SideStats, drop_reason, normalize_lines
from pipeline.errors import UserError
from pipeline.files import SIDES
from pipeline.params import CleanParams, safe_name

# In the order they are tried; score last, over the pairs every other rule kept (the clean stage's)
DROP_REASONS = ("empty", "heldout_overlap", "too_long", "ratio", *filters.REASONS, "duplicate", "score")
CHUNK_PAIRS = 10_000  # pairs a worker cleans at a time: memory is a few chunks per worker
HASH_BYTES = 8  # 64-bit hashes: the collision rate is in the module docstring

_CODES = (None, *DROP_REASONS)  # a pair's outcome as one byte: 0 kept, else 1 + its reason's index
_CODE = {reason: code for code, reason in enumerate(_CODES)}


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=HASH_BYTES).digest()


@dataclass
class SplitStats:
    lines_in: int = 0
    lines_out: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    normalized: dict[str, SideStats] = field(default_factory=lambda: {s: SideStats() for s in SIDES})
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # train only: per source
    detokenized: dict[str, int] | None = None  # per side, lines detokenization changed; None: none tokenized

    def to_dict(self) -> SplitCounts:
        out: SplitCounts = {
            "lines_in": self.lines_in,
            "lines_out": self.lines_out,
            "dropped": dict(self.dropped),
            "normalized": {side: vars(s).copy() for side, s in self.normalized.items()},
        }
        if self.detokenized is not None:
            out["detokenized"] = dict(self.detokenized)
        if self.sources:
            out["sources"] = self.sources
        return out

    def add_detokenized(self, counts: tuple[int, int]) -> None:
        if self.detokenized is not None:
            for side, n in zip(SIDES, counts):
                self.detokenized[side] += n

    def add_normalized(self, counts: dict[str, SideStats]) -> None:
        for side, c in counts.items():
            mine = self.normalized[side]
            mine.control_chars += c.control_chars
            mine.nfc += c.nfc
            mine.whitespace += c.whitespace


@dataclass(frozen=True)
class Heldout:
    """Hashes of the normalized non-empty sources and targets of every val and test set."""

    src: frozenset[bytes]
    tgt: frozenset[bytes]

    def overlaps(self, src: str, tgt: str) -> bool:
        return digest(src) in self.src or digest(tgt) in self.tgt


NO_HELDOUT = Heldout(frozenset(), frozenset())


# --- one chunk: what a worker does ----------------------------------------------------------


@dataclass
class Cleaned:
    """A chunk's outcome: per pair its code (_CODES), the normalized lines (train: only those that
    passed every rule but dedupe), their pair hashes (dedupe on), and the normalization counts."""

    codes: bytes
    src: list[str]
    tgt: list[str]
    hashes: bytes
    normalized: dict[str, SideStats]
    detokenized: tuple[int, int] = (0, 0)  # per side, the lines detokenization changed


@dataclass(frozen=True)
class Tokenized:
    """Which lines (ranges [start, end) of a split or chunk) are Moses-tokenized; the sides' languages."""

    ranges: tuple[tuple[int, int], ...] = ()
    langs: tuple[str, str] = ("", "")


UNTOKENIZED = Tokenized()  # a split no source of which ships tokenized


@dataclass(frozen=True)
class SourceRules:
    """The web-data rules of each source's lines (ranges [start, end) of a split or chunk), and the
    languages of its sides; lines outside every range get none."""

    ranges: tuple[tuple[int, int, filters.Rules, tuple[str, str]], ...] = ()

    def within(self, start: int, end: int) -> SourceRules:
        """The ranges of lines start..end, counted from `start`."""
        return SourceRules(
            tuple(
                (max(lo, start) - start, min(hi, end) - start, rules, langs)
                for lo, hi, rules, langs in self.ranges
                if lo < end and hi > start
            )
        )

    def at(self, n: int) -> list[tuple[filters.Rules, tuple[str, str]] | None]:
        """Per line of n, its rules and languages (None: no rule applies)."""
        out: list[tuple[filters.Rules, tuple[str, str]] | None] = [None] * n
        for lo, hi, rules, langs in self.ranges:
            if rules.any:
                out[lo:hi] = [(rules, langs)] * (hi - lo)
        return out


NO_RULES = SourceRules()


def chosen_rules(params: CleanParams, name: str, origin: str) -> tuple[str, ...]:
    """The names of the train source `name`'s web-data rules: its own (clean.source_filters), else
    clean.web_filters for a set of mtdata's (web-crawled and mined), else clean.filters."""
    own = {safe_name(key): rules for key, rules in params.source_filters.items()}  # mtdata:ID or mtdata-ID
    return own.get(name, params.web_filters if origin == "mtdata" else params.filters)


def scored_sources(params: CleanParams, manifest: Manifest) -> set[str]:
    """The names of the manifest's train sources that have the score rule among their rules."""
    return {
        record["name"]
        for record in manifest.get("splits", {}).get("train", [])
        if "score" in chosen_rules(params, record["name"], record.get("origin", ""))
    }


def rules_for(params: CleanParams, name: str, origin: str) -> filters.Rules:
    """The rules of chosen_rules that look at one pair alone (all but score)."""
    chosen = chosen_rules(params, name, origin)
    return filters.Rules(
        min_words=params.min_words if "min_words" in chosen else 0,
        boilerplate="boilerplate" in chosen,
        repeated="repeated" in chosen,
        untranslated="untranslated" in chosen,
        numbers="numbers" in chosen,
        min_script_ratio=params.min_script_ratio if "script" in chosen else 0.0,
        langid="langid" in chosen,
    )


def train_rules(params: CleanParams, manifest: Manifest) -> SourceRules:
    """Each train source's rules over its lines, in the manifest's order (the split's)."""
    ranges, start = [], 0
    default = (manifest.get("src_lang", ""), manifest.get("tgt_lang", ""))
    for record in manifest.get("splits", {}).get("train", []):
        langs = (record.get("src_lang", default[0]), record.get("tgt_lang", default[1]))
        rules = rules_for(params, record["name"], record.get("origin", ""))
        ranges.append((start, start + record["lines"], rules, langs))
        start += record["lines"]
    return SourceRules(tuple(ranges))


def clean_lines(
    src: list[str],
    tgt: list[str],
    params: CleanParams,
    train: bool,
    heldout: Heldout,
    tokenized: Tokenized = UNTOKENIZED,
    rules: SourceRules = NO_RULES,
) -> Cleaned:
    """Detokenize (where `tokenized` says) and normalize a chunk of pairs; for train apply every rule
    whose answer is the pair's own (those of `rules` to each source's lines). A source line's
    target-language tag is set aside first and put back last: the rules see the text (a tagged line
    overlaps a test line of the same text)."""
    src_tags, src = split_tags(src)
    src, tgt, detokenized = _detokenized(src, tgt, tokenized)
    normalized = {side: SideStats() for side in SIDES}
    src = normalize_lines(src, normalized["src"])
    tgt = normalize_lines(tgt, normalized["tgt"])
    if not train:
        return Cleaned(bytes(len(src)), _retagged(src_tags, src), tgt, b"", normalized, detokenized)
    codes = bytearray(len(src))
    kept_src, kept_tgt, hashes = [], [], []
    decontaminate = params.decontaminate and (heldout.src or heldout.tgt)
    for i, (tag, s, t, web) in enumerate(zip(src_tags, src, tgt, rules.at(len(src)))):
        reason = drop_reason(s, t, params)
        if reason is None and web is not None:
            reason = filters.noise_reason(s, t, web[1], web[0])
        if reason is None and decontaminate and heldout.overlaps(s, t):
            reason = "heldout_overlap"
        if reason is not None:
            codes[i] = _CODE[reason]
            continue
        kept_src.append(tag + s)
        kept_tgt.append(t)
        if params.dedupe:  # normalized text has no LF: the pair is unambiguous; another tag, another pair
            hashes.append(digest(f"{tag}{s}\n{t}"))
    return Cleaned(bytes(codes), kept_src, kept_tgt, b"".join(hashes), normalized, detokenized)


def _retagged(src_tags: list[str], src: list[str]) -> list[str]:
    return [tag + s if s else tag.rstrip() for tag, s in zip(src_tags, src)]


def _detokenized(
    src: list[str], tgt: list[str], tokenized: Tokenized
) -> tuple[list[str], list[str], tuple[int, int]]:
    """The sides with the lines in tokenized.ranges detokenized, and per side how many that changed."""
    changed = [0, 0]
    sides = [src, tgt]
    for start, end in tokenized.ranges:
        for k, lang in enumerate(tokenized.langs):
            lines, n = detokenize_lines(sides[k][start:end], lang)
            sides[k] = [*sides[k][:start], *lines, *sides[k][end:]]
            changed[k] += n
    return sides[0], sides[1], (changed[0], changed[1])


def _decode(data: bytes, path: str) -> list[str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 ({e.reason}); run the download stage again") from e
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


@dataclass(frozen=True)
class Job:
    """A chunk of a split: the same number of lines of each side, as byte ranges of its files.

    A worker reads its chunk itself (from the page cache: the parent just read it to find the
    line ends), so the parent, which feeds every worker, does not also pipe the text to it.
    """

    names: tuple[str, str]
    starts: tuple[int, int]
    sizes: tuple[int, int]
    train: bool
    tokenized: Tokenized = UNTOKENIZED
    rules: SourceRules = NO_RULES

    def read(self) -> tuple[bytes, bytes]:
        sides = []
        for name, start, size in zip(self.names, self.starts, self.sizes):
            with open(name, "rb") as f:
                f.seek(start)
                sides.append(f.read(size))
        return sides[0], sides[1]


def clean_job(job: Job, params: CleanParams, heldout: Heldout) -> Cleaned:
    src, tgt = (_decode(data, name) for data, name in zip(job.read(), job.names))
    return clean_lines(src, tgt, params, job.train, heldout, job.tokenized, job.rules)


@dataclass(frozen=True)
class CleanedText:
    """A train chunk's outcome as a worker sends it: the candidates as the bytes to write."""

    codes: bytes
    text: tuple[bytes, bytes]
    hashes: bytes
    normalized: dict[str, SideStats]
    detokenized: tuple[int, int]


_WORKER: tuple[CleanParams, Heldout] | None = None  # a pool worker's params, set once by start_worker


def start_worker(params: CleanParams, heldout: Heldout) -> None:
    global _WORKER
    _WORKER = (params, heldout)


def worker_job(job: Job) -> CleanedText:
    assert _WORKER is not None
    chunk = clean_job(job, *_WORKER)
    text = (joined(chunk.src), joined(chunk.tgt))
    return CleanedText(chunk.codes, text, chunk.hashes, chunk.normalized, chunk.detokenized)


def joined(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""


# --- the parent: outcomes per source, then the duplicates ---------------------------------


class TrainFilter:
    """Counts the train split's outcomes, in total and per source.

    Two steps: `take` each cleaned chunk in order (every rule but dedupe; the pairs that pass are
    the candidates), then `drop_duplicates` over the candidates, a stretch at a time in order.
    """

    def __init__(self, params: CleanParams, sources: Sequence[tuple[str, int | None]], stats: SplitStats):
        self.params, self.stats = params, stats
        self.done = 0  # pairs taken so far
        self._ranges: list[tuple[int, int | None, dict[str, Any]]] = []  # (first line, end or None, counts)
        start = 0
        for name, n_lines in sources:
            counts: dict[str, Any] = {
                "lines_in": n_lines or 0,
                "lines_out": 0,
                "dropped": dict.fromkeys(DROP_REASONS, 0),
            }
            stats.sources[name] = counts
            self._ranges.append((start, None if n_lines is None else start + n_lines, counts))
            start += n_lines or 0
        self._candidate_ends: np.ndarray | None = None  # per source, set by the first drop_duplicates

    def take(self, chunk_codes: bytes) -> None:
        """Count a chunk's outcomes (code 0: a candidate, one no rule but dedupe dropped)."""
        codes = np.frombuffer(chunk_codes, dtype=np.uint8)
        self.stats.lines_in += len(codes)
        self.stats.lines_out += len(codes) - int(np.count_nonzero(codes))
        start, end = self.done, self.done + len(codes)
        for first, last, counts in self._ranges:
            lo, hi = max(first, start), end if last is None else min(last, end)
            if lo < hi:
                self._count(np.bincount(codes[lo - start : hi - start], minlength=len(_CODES)), counts)
        self._count(np.bincount(codes, minlength=len(_CODES)), None)
        self.done = end

    def _count(self, by_code: np.ndarray, counts: dict[str, Any] | None) -> None:
        dropped = self.stats.dropped if counts is None else counts["dropped"]
        for code, reason in enumerate(_CODES[1:], 1):
            dropped[reason] += int(by_code[code])
        if counts is not None:
            counts["lines_out"] += int(by_code[0])
            if self._ranges[-1][1] is None:  # one source of unknown size: what was read
                counts["lines_in"] += int(by_code.sum())

    def drop_duplicates(self, start: int, duplicate: np.ndarray) -> None:
        """Count candidates start.. (after every chunk was taken) where `duplicate` is True as dropped."""
        if self._candidate_ends is None:
            self._candidate_ends = np.cumsum([counts["lines_out"] for _, _, counts in self._ranges])
        self._drop("duplicate", self._candidate_ends, np.flatnonzero(duplicate) + start)

    def kept_ends(self) -> np.ndarray:
        """Per source, the end of its pairs among those kept so far (they are in the sources' order)."""
        return np.cumsum([counts["lines_out"] for _, _, counts in self._ranges])

    def drop_scored(self, dropped: np.ndarray) -> None:
        """Count the kept pairs (after dedupe) where `dropped` is True as dropped by the score rule."""
        self._drop("score", self.kept_ends(), np.flatnonzero(dropped))

    def _drop(self, reason: str, ends: np.ndarray, at: np.ndarray) -> None:
        """Count the pairs at `at` as dropped for `reason`, each in the source whose range holds it."""
        if not len(at):
            return
        self.stats.lines_out -= len(at)
        self.stats.dropped[reason] += len(at)
        per_source = np.bincount(np.searchsorted(ends, at, side="right"), minlength=len(self._ranges))
        for (_, _, counts), k in zip(self._ranges, per_source.tolist()):
            counts["lines_out"] -= k
            counts["dropped"][reason] += k


def tokenized_ranges(manifest: Manifest, stem: str) -> tuple[tuple[int, int], ...]:
    """Line ranges [start, end) of the split file STEM (train, val, test/NAME) whose source is tokenized.

    A split's sources are concatenated in manifest order; a held-out split lists its `parts`.
    """
    splits = manifest.get("splits", {})
    if stem.startswith("test/"):
        records = [r for r in splits.get("test", []) if r["name"] == stem.removeprefix("test/")]
    else:
        records = splits.get(stem, [])
    runs = [part for r in records for part in r.get("parts", [r])]
    ranges, start = [], 0
    for run in runs:
        if run.get("tokenized"):
            ranges.append((start, start + run["lines"]))
        start += run["lines"]
    return tuple(ranges)
