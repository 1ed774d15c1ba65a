"""Stage `clean`: normalize every line of every split; filter training pairs only.

The rules, the workers' jobs and the per-corpus counts are pipeline/data/cleaning.py's; this
module runs them over data/raw: the val and test sets first (their hashes are decontamination's),
then the train split through data.workers processes and dedupe's second pass, and writes
data/clean and its stats.json atomically.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import numpy as np

from pipeline import files
from pipeline.data import artifacts, dedupe
from pipeline.data.cleaning import (
    CHUNK_PAIRS,
    NO_HELDOUT,
    NO_RULES,
    UNTOKENIZED,
    Heldout,
    Job,
    SourceRules,
    SplitStats,
    Tokenized,
    TrainFilter,
    clean_job,
    digest,
    joined,
    scored_sources,
    start_worker,
    tokenized_ranges,
    train_rules,
    worker_job,
)
from pipeline.data.lines import skip_lines
from pipeline.data.pool import ordered_results, resolve_workers
from pipeline.data.tags import split_tags
from pipeline.errors import UserError
from pipeline.files import SIDES, PairedWriter
from pipeline.lineage import sha256
from pipeline.params import CleanParams, PairScoreParams
from pipeline.stages.options import load_params, params_option


def clean(
    params: CleanParams, raw: Path, out: Path, workers: int = 1, extra: Path | None = None
) -> artifacts.CleanStats:
    """Clean raw/{train,val}.{src,tgt} and raw/test/*.{src,tgt} into `out` (atomically) with stats.json.

    The val and test sets are cleaned here first (their hashes are decontamination's); the train
    split then goes through `workers` processes. `extra`: more train sources after raw's, as a
    download-like directory (train.{src,tgt} and the manifest listing them): the backtranslate
    stage's synthetic pairs, filtered, deduplicated and decontaminated like the rest.
    """
    raw = Path(raw)
    for stem in ("train", "val"):
        _check_exists(raw, stem)
    evals = ["val", *(f"test/{n}" for n in _test_names(raw))]
    for stem in evals[1:]:
        _check_exists(raw, stem)
    val: artifacts.SplitCounts | None = None
    tests: dict[str, artifacts.SplitCounts] = {}
    manifest = artifacts.manifest(raw)
    langs = (manifest.get("src_lang", ""), manifest.get("tgt_lang", ""))
    heldout_src: set[bytes] = set()
    heldout_tgt: set[bytes] = set()
    with files.atomic_path(out) as tmp:
        (tmp / "test").mkdir(parents=True)
        for stem in evals:
            split_stats = SplitStats()
            ranges = tokenized_ranges(manifest, stem)
            split_stats.detokenized = dict.fromkeys(SIDES, 0) if ranges else None
            with PairedWriter(tmp / stem) as output:
                jobs = _jobs(raw, stem, train=False, tokenized=Tokenized(ranges, langs))
                for chunk in (clean_job(job, params, NO_HELDOUT) for job in jobs):
                    split_stats.add_normalized(chunk.normalized)
                    split_stats.add_detokenized(chunk.detokenized)
                    split_stats.lines_in += len(chunk.src)
                    output.write_pair(joined(chunk.src), joined(chunk.tgt))
                    heldout_src.update(digest(line) for line in split_tags(chunk.src)[1] if line)
                    heldout_tgt.update(digest(line) for line in chunk.tgt if line)
            split_stats.lines_out = split_stats.lines_in
            if stem == "val":
                val = split_stats.to_dict()
            else:
                tests[stem.removeprefix("test/")] = split_stats.to_dict()
        heldout = Heldout(frozenset(heldout_src), frozenset(heldout_tgt))
        train, scored = _clean_train(
            params, raw, tmp / "train", heldout, workers, tmp.parent, manifest, extra
        )
        assert val is not None  # evals[0]
        # unicode_version: NFC and the categories depend on it
        stats: artifacts.CleanStats = {
            "train": train,
            "val": val,
            "test": tests,
            "unicode_version": unicodedata.unidata_version,
        }
        stats.update({"score": scored} if scored is not None else {})
        tags = [*manifest.get("tags", []), *(artifacts.manifest(extra).get("tags", []) if extra else [])]
        if tags:
            stats["tags"] = list(dict.fromkeys(tags))
        files.write_json(tmp / artifacts.CLEAN_STATS, stats)
    return stats


def _clean_train(
    params: CleanParams,
    raw: Path,
    out: Path,
    heldout: Heldout,
    workers: int,
    scratch: Path,
    manifest: artifacts.Manifest,
    extra: Path | None = None,
) -> tuple[artifacts.SplitCounts, artifacts.ScoreRecord | None]:
    """Clean the train split (raw's, then extra's) into out.{src,tgt}: the candidates (every rule
    but dedupe and score; each source's rules for web data) go to `scratch` with their hashes
    spilled beside them, then a pass in order drops the duplicates, and where a source has the score
    rule a last pass drops its pairs the models find least likely. Also what scored them, if any."""
    langs = (manifest.get("src_lang", ""), manifest.get("tgt_lang", ""))
    tokenized = Tokenized(tokenized_ranges(manifest, "train"), langs)
    rules = train_rules(params, manifest)
    corpora = artifacts.listed_corpora(raw / artifacts.MANIFEST)
    more, n_more = _extra_corpora(extra, bool(corpora))
    stats = SplitStats(detokenized=dict.fromkeys(SIDES, 0) if tokenized.ranges else None)
    sources: list[tuple[str, int | None]] = [(c.name, c.lines) for c in corpora + more]
    train = TrainFilter(params, sources or [(artifacts.WHOLE, None)], stats)
    # sources of several pairs: each keeps its pair, for train.source_temperature
    for corpus in corpora + more:
        if corpus.pair:
            stats.sources[corpus.name]["pair"] = corpus.pair
    candidates = scratch / "train.candidates"
    jobs = _jobs(raw, "train", train=True, tokenized=tokenized, rules=rules)
    if more:
        assert extra is not None
        _check_exists(extra, "train")
        jobs = itertools.chain(jobs, _jobs(extra, "train", train=True))
    spilled = dedupe.SpilledHashes(scratch) if params.dedupe else contextlib.nullcontext(None)
    with spilled as hashes:
        with (
            PairedWriter(candidates) as output,
            ordered_results(worker_job, jobs, workers, start_worker, (params, heldout), "clean") as chunks,
        ):
            for chunk in chunks:
                stats.add_normalized(chunk.normalized)
                stats.add_detokenized(chunk.detokenized)
                train.take(chunk.codes)
                output.write_pair(*chunk.text)
                if hashes is not None:
                    hashes.add(np.frombuffer(chunk.hashes, dtype=np.uint64))
        artifacts.check_lines(
            raw / artifacts.MANIFEST, corpora, stats.lines_in - n_more, raw / "train.src", "download"
        )
        if not stats.lines_out:
            dropped = ", ".join(f"{k} {v}" for k, v in stats.dropped.items() if v)
            raise UserError(
                f"clean dropped all {stats.lines_in} training pairs ({dropped}); raise clean.max_words "
                "or clean.max_ratio, loosen clean's rules for web data, or check the corpus"
            )
        duplicates = hashes.duplicates() if hashes is not None else None
    with_score = scored_sources(params, manifest)
    scored = [name in with_score for name, _ in sources]
    record = _write_kept(params.score, train, duplicates, candidates, out, scored, langs)
    return stats.to_dict(), record


def _write_kept(
    params: PairScoreParams,
    train: TrainFilter,
    duplicates: np.ndarray | None,
    candidates: Path,
    out: Path,
    scored: list[bool],
    pair: tuple[str, str],
) -> artifacts.ScoreRecord | None:
    """Write the candidates but the duplicates, and, where a source is `scored`, the pairs the score
    rule drops, to out.{src,tgt}; what scored them, if anything did. `pair`: the corpus's languages."""
    if not any(scored):
        _drop_duplicates(train, duplicates, candidates, out)
        return None
    deduped = Path(f"{candidates}.deduped")
    _drop_duplicates(train, duplicates, candidates, deduped)
    return _drop_scored(params, train, scored, deduped, out, pair)


def _drop_scored(
    params: PairScoreParams,
    train: TrainFilter,
    scored: list[bool],
    kept: Path,
    out: Path,
    pair: tuple[str, str],
) -> artifacts.ScoreRecord:
    """Write the pairs at kept.{src,tgt} to out.{src,tgt} but those of the `scored` sources (a flag
    per source) that the score rule drops; counted in `train`. Scored a chunk at a time."""
    from pipeline.decoding.pair_scores import PairScorer, dropped  # torch: only where a rule scores

    assert params.forward is not None  # validate_clean: the score rule needs a model
    reverse = None if params.reverse is None else Path(params.reverse)
    scorer = PairScorer(
        Path(params.forward), reverse, params.batch_tokens, params.relative, pair if all(pair) else None
    )
    ends = train.kept_ends()
    on = np.repeat(np.array(scored), np.diff(ends, prepend=0))  # per kept pair: is it scored?
    scores = np.full(len(on), np.nan)
    done = 0
    for src, tgt in _line_chunks(kept):
        idx = np.flatnonzero(on[done : done + len(src)])
        if len(idx):
            text_src = split_tags([src[i].decode("utf-8").rstrip("\n") for i in idx])[1]
            text_tgt = [tgt[i].decode("utf-8").rstrip("\n") for i in idx]
            scores[done + idx] = scorer(text_src, text_tgt)
        done += len(src)
    drop = dropped(scores, params.drop_worst, params.max_score)
    train.drop_scored(drop)
    _filter_pairs(kept, out, lambda start, end: drop[start:end])
    worst_kept = np.nanmax(np.where(drop, np.nan, scores)) if (~drop & on).any() else None
    return {
        "forward": params.forward,
        "forward_sha256": sha256(Path(params.forward) / "model.pt"),
        "reverse": params.reverse,
        "reverse_sha256": sha256(Path(params.reverse) / "model.pt") if params.reverse else None,
        "relative": params.relative,
        "scored": int(on.sum()),
        "dropped": int(drop.sum()),
        "highest_kept": None if worst_kept is None else round(float(worst_kept), 4),
    }


def _line_chunks(stem: Path) -> Iterator[tuple[list[bytes], list[bytes]]]:
    """The pairs of stem.{src,tgt} as lines (bytes, newline kept), CHUNK_PAIRS at a time."""
    with open(f"{stem}.src", "rb") as fs, open(f"{stem}.tgt", "rb") as ft:
        while src := list(itertools.islice(fs, CHUNK_PAIRS)):
            yield src, list(itertools.islice(ft, len(src)))


def _extra_corpora(extra: Path | None, after: bool) -> tuple[list[artifacts.Corpus], int]:
    """extra's train sources and its number of pairs, counted on their own (a mismatch names the
    backtranslate stage); `after`: whether raw lists sources for them to follow."""
    more = artifacts.listed_corpora(extra / artifacts.MANIFEST) if extra is not None else []
    if not more:
        return [], 0
    assert extra is not None
    if not after:
        raise UserError(f"the raw directory lists no train sources, so {extra}'s cannot follow them")
    n_more = sum(len(lines) for lines in files.line_chunks(extra / "train.src"))
    artifacts.check_lines(extra / artifacts.MANIFEST, more, n_more, extra / "train.src", "backtranslate")
    return more, n_more


def _drop_duplicates(train: TrainFilter, duplicates: np.ndarray | None, candidates: Path, out: Path) -> None:
    """Write the candidates not marked in the `duplicates` bitmap (None: none are) to out.{src,tgt}."""
    if duplicates is None or not duplicates.any():
        for side in SIDES:
            os.replace(f"{candidates}.{side}", f"{out}.{side}")
        return

    def duplicate(start: int, end: int) -> np.ndarray:
        marked = dedupe.bits_range(duplicates, start, end)
        train.drop_duplicates(start, marked)
        return marked

    _filter_pairs(candidates, out, duplicate)


def _filter_pairs(stem: Path, out: Path, dropped: Callable[[int, int], np.ndarray]) -> None:
    """Stream stem.{src,tgt} to out.{src,tgt} but the pairs `dropped(start, end)` marks in each
    chunk of pairs start..end, then remove stem's files."""
    with PairedWriter(out) as kept:
        done = 0
        for src, tgt in _line_chunks(stem):
            keep = ~dropped(done, done + len(src))
            kept.write_pair(b"".join(itertools.compress(src, keep)), b"".join(itertools.compress(tgt, keep)))
            done += len(src)
    for side in SIDES:
        Path(f"{stem}.{side}").unlink()


def _jobs(
    raw: Path,
    stem: str,
    train: bool,
    tokenized: Tokenized = UNTOKENIZED,
    rules: SourceRules = NO_RULES,
) -> Iterator[Job]:
    """The split's pairs as files hold them, CHUNK_PAIRS at a time; sides of unequal length refused.

    `tokenized`: the split's tokenized lines, `rules` its sources' web-data rules; each job gets
    those of its chunk.
    """
    paths = [raw / f"{stem}.{side}" for side in SIDES]
    names = (str(paths[0]), str(paths[1]))
    with open(paths[0], "rb") as src, open(paths[1], "rb") as tgt:
        done, starts = 0, (0, 0)
        while True:
            (n_src, size_src), (n_tgt, size_tgt) = (skip_lines(f, CHUNK_PAIRS) for f in (src, tgt))
            if n_src != n_tgt:
                n_src, n_tgt = done + n_src + sum(1 for _ in src), done + n_tgt + sum(1 for _ in tgt)
                raise UserError(
                    f"{raw}/{stem}.src has {n_src} lines but {raw}/{stem}.tgt has {n_tgt}; "
                    "run the download stage again"
                )
            if not n_src:
                return
            ranges = tuple(
                (max(lo, done) - done, min(hi, done + n_src) - done)
                for lo, hi in tokenized.ranges
                if lo < done + n_src and hi > done
            )
            chunk_rules = rules.within(done, done + n_src)
            done += n_src
            yield Job(
                names, starts, (size_src, size_tgt), train, Tokenized(ranges, tokenized.langs), chunk_rules
            )
            starts = (starts[0] + size_src, starts[1] + size_tgt)


def _check_exists(raw: Path, stem: str) -> None:
    for side in SIDES:
        if not (raw / f"{stem}.{side}").is_file():
            raise UserError(f"{raw / f'{stem}.{side}'}: no such file; run the download stage first")


def _test_names(raw: Path) -> list[str]:
    names = sorted(p.name.removesuffix(".src") for p in (raw / "test").glob("*.src"))
    if not names:
        raise UserError(f"{raw}/test/: no test set (<name>.src and <name>.tgt); run the download stage first")
    return names


@click.command("clean")
@params_option
@click.option(
    "--raw",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/raw",
    show_default=True,
    help="The download stage's output.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/clean",
    show_default=True,
    help="Output directory: {train,val}.{src,tgt}, test/<name>.{src,tgt} and stats.json.",
)
@click.option(
    "--extra",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="More train sources, after RAW's: the backtranslate stage's output (data/bt).",
)
def command(params_file: Path, raw: Path, out: Path, extra: Path | None) -> None:
    """Normalize the corpus in RAW (and EXTRA's train sources) and filter its training pairs into OUT."""
    params = load_params(params_file)
    stats = clean(params.clean, raw, out, resolve_workers(params.data.workers), extra)
    train = stats["train"]
    click.echo(f"wrote {out}: train {train['lines_out']} of {train['lines_in']} pairs kept")
