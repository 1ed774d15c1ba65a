"""Stage `distill`: the teachers' translations of the training sources, for a student to learn from.

    python -m pipeline distill --params params.yaml --model data/model --clean data/clean \
        --bpe data/bpe --teachers data/teachers --work data/distill-work --out data/distill

Sequence-level knowledge distillation (Kim & Rush 2016): the teachers (distill.teachers, or data/model
with decode.ensemble; then the teachers stage's, of distill.teacher_seeds, in --teachers) translate
the cleaned training sources with beam search (distill.decode), averaging their probabilities.
The work is done in chunks, each written whole to --work before the next: a killed run goes on
from the first missing chunk, with the output of an uninterrupted run (a sentence's translation
does not depend on its batch); --work's key.json says what the chunks were made from. --out
records each teacher's sha256 and MLflow run in teachers.json. With distill.enabled false it
writes only off.json. docs/distillation.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from pipeline import files, lineage
from pipeline import params as P
from pipeline.data import artifacts
from pipeline.devices import DEVICES
from pipeline.errors import ParamsError, UserError
from pipeline.stages.options import (
    bpe_option,
    clean_option,
    directory,
    load_params,
    model_option,
    params_option,
)

OFF = artifacts.REVERSE_OFF  # the whole of --out while distillation is off
TEACHERS = lineage.TEACHERS_FILE  # in --out: who translated, and how
KEY = "key.json"  # in --work: what its chunks were made from
CHUNK_LINES = 2000


def teacher_dirs(params: P.Params, model_dir: Path, seeded: Path | None = None) -> list[tuple[Path, str]]:
    """The teachers' model directories, each with the setting that names it (for messages): those
    named (distill.teachers, else model_dir with decode.ensemble), then the teachers stage's
    (`seeded`, one per seed of distill.teacher_seeds)."""
    if params.distill.teachers:
        named = [(Path(path), "distill.teachers") for path in params.distill.teachers]
    else:
        ensemble = [(Path(path), "decode.ensemble") for path in params.decode.ensemble]
        named = [(model_dir, "--model"), *ensemble]
    if not params.distill.teacher_seeds:
        return named
    if seeded is None:
        raise UserError("distill.teacher_seeds: pass --teachers, the teachers stage's output (data/teachers)")
    for seed in params.distill.teacher_seeds:
        where = lineage.seeded_teacher(seeded, seed)
        if not (where / lineage.MODEL_FILE).is_file():
            raise UserError(
                f"distill.teacher_seeds: {where} holds no teacher of seed {seed}; run the teachers "
                "stage first (dvc repro teachers)"
            )
        named.append((where, "distill.teacher_seeds"))
    return named


def check_teachers(params: P.Params, teachers: list[tuple[Path, str]], bpe_dir: Path) -> list[dict[str, Any]]:
    """Each teacher's record (lineage.Parent's: path, the sha256 of its weights, its MLflow run);
    refused in one line: a directory that holds no model, one of another pair, one of another
    vocabulary than bpe_dir's (the student trains with that one, on what the teachers write)."""
    from pipeline.data.vocab import Vocab

    vocab = Vocab.load(bpe_dir)
    pair = f"{params.data.src_lang}->{params.data.tgt_lang}"
    records = []
    for where, key in teachers:
        record, saved = lineage.read(str(where), key)
        theirs = f"{saved.data.src_lang}->{saved.data.tgt_lang}"
        if theirs != pair:
            raise ParamsError(f"{key}: {where} translates {theirs}, this run {pair}; list teachers of {pair}")
        differ = vocab.differing_files(where)
        if differ:
            raise ParamsError(
                f"{key}: {where} has another vocabulary than {bpe_dir} ({', '.join(differ)} differ); the "
                "student reads what its teachers write with that one: list teachers trained on this "
                "run's data/bpe"
            )
        records.append(record.to_dict())
    return records


def work_key(
    params: P.Params, records: list[dict[str, Any]], source: Path, chunk_lines: int
) -> dict[str, Any]:
    """What --work's chunks depend on: the teachers' weights, the source text and the decoding."""
    digest = hashlib.sha256()
    for lines in files.line_chunks(source):
        digest.update("\n".join(lines).encode("utf-8") + b"\n")
    decode = dataclasses.asdict(params.distill.decode)
    key = {
        "teachers": [r["model_sha256"] for r in records],
        "source_sha256": digest.hexdigest(),
        "decode": decode,
        "chunk_lines": chunk_lines,
    }
    return json.loads(json.dumps(key))  # as key.json stores it (tuples become lists)


def translate_chunks(
    params: P.Params, dirs: list[Path], key: dict[str, Any], source: Path, work: Path, device: str
) -> tuple[int, int]:
    """work/chunks/NNNNN.tgt for each key["chunk_lines"] lines of `source`, those not there already;
    -> (chunks found from an earlier run, chunks translated now)."""
    chunks = work / "chunks"
    key_file = work / KEY
    if not key_file.is_file() or json.loads(key_file.read_text(encoding="utf-8")) != key:
        shutil.rmtree(chunks, ignore_errors=True)  # made by other teachers or from another source
        key_file.unlink(missing_ok=True)
    chunks.mkdir(parents=True, exist_ok=True)
    files.write_json(key_file, key)
    translator = None
    found = done = 0
    size = key["chunk_lines"]
    for index, lines in enumerate(files.batched(_lines(source), size)):
        path = chunks / f"{index:05d}.tgt"
        if path.is_file():
            found += 1
            continue
        if translator is None:
            translator = _translator(params, dirs, device)
        files.write_lines(path, list(translator.translate_corpus(lines)))  # whole, or not at all
        done += 1
        click.echo(f"distill: {index * size + len(lines):,} lines translated", err=True)
    return found, done


def _translator(params: P.Params, dirs: list[Path], device: str) -> Any:
    """The first teacher, with the others as its ensemble (one teacher: none)."""
    from pipeline.decoding.translator import Translator

    settings = dataclasses.replace(params.distill.decode, ensemble=tuple(map(str, dirs[1:])))
    return Translator.from_dir(dirs[0], device, settings=settings, ensemble_name="the teachers")


def _lines(path: Path) -> Iterator[str]:
    for lines in files.line_chunks(path):
        yield from lines


def assemble(
    source: Path, work: Path, out: Path, teachers: dict[str, Any], chunk_lines: int
) -> dict[str, Any]:
    """out/{train.src,train.tgt}: each source line and its teachers' translation, the pairs with an
    empty translation left out; teachers.json and stats.json beside them, atomically."""
    chunks = sorted((work / "chunks").glob("*.tgt"))
    pairs = empty = 0
    with files.atomic_path(out) as tmp:
        tmp.mkdir()
        with files.PairedWriter(tmp / "train") as w:
            for sources, path in zip(files.batched(_lines(source), chunk_lines), chunks, strict=True):
                targets = path.read_text(encoding="utf-8").splitlines()
                if len(targets) != len(sources):
                    raise UserError(
                        f"{path}: {len(targets)} lines for {len(sources)} sources; delete it and rerun"
                    )
                kept = [(s, t) for s, t in zip(sources, targets) if t.strip()]
                w.write_lines("src", [s for s, _ in kept])
                w.write_lines("tgt", [t for _, t in kept])
                pairs, empty = pairs + len(kept), empty + len(sources) - len(kept)
        files.write_json(tmp / TEACHERS, teachers)
        stats = {"enabled": True, "pairs": pairs, "empty_translations": empty}
        files.write_json(tmp / artifacts.CLEAN_STATS, stats)
    return stats


def distill(
    params: P.Params,
    model_dir: Path,
    clean: Path,
    bpe_dir: Path,
    work: Path,
    out: Path,
    device: str = "auto",
    chunk_lines: int = CHUNK_LINES,
    seeded: Path | None = None,
) -> dict[str, Any]:
    """Translate (or go on translating) clean's training sources with the teachers into `out`;
    `seeded`: the teachers stage's output, with the teachers of distill.teacher_seeds."""
    if not params.distill.enabled:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        files.write_json(
            out / OFF, {"enabled": False, "why": "distill.enabled is false: no distilled corpus"}
        )
        work.mkdir(parents=True, exist_ok=True)
        return {"enabled": False}
    source = clean / "train.src"
    if not source.is_file():
        raise UserError(f"{source}: missing; run the clean stage first")
    teachers = teacher_dirs(params, model_dir, seeded)
    records = check_teachers(params, teachers, bpe_dir)
    dirs = [where for where, _ in teachers]
    start = time.perf_counter()
    found, done = translate_chunks(
        params, dirs, work_key(params, records, source, chunk_lines), source, work, device
    )
    record = {"teachers": records, "decode": dataclasses.asdict(params.distill.decode)}
    stats = assemble(source, work, out, record, chunk_lines)
    return stats | {
        "chunks_resumed": found,
        "chunks_translated": done,
        "seconds": round(time.perf_counter() - start, 1),
    }


@click.command("distill")
@params_option
@model_option
@clean_option
@bpe_option
@directory("teachers", help="The teachers stage's output: the teachers of distill.teacher_seeds.")
@directory("work", required=True, help="Scratch kept across runs: the chunks translated so far.")
@directory("out", required=True, help="Where to write the distilled corpus (replaced atomically).")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
@click.option(
    "--chunk-lines",
    type=click.IntRange(min=1),
    default=CHUNK_LINES,
    show_default=True,
    help="Lines translated and written at a time: the most a killed run loses.",
)
def command(
    params_file: Path,
    model_dir: Path,
    clean_dir: Path,
    bpe_dir: Path,
    teachers_dir: Path | None,
    work_dir: Path,
    out_dir: Path,
    device: str,
    chunk_lines: int,
) -> None:
    """Translate the training sources with the teachers: the corpus the student learns from."""
    params = load_params(params_file)
    stats = distill(
        params, model_dir, clean_dir, bpe_dir, work_dir, out_dir, device, chunk_lines, seeded=teachers_dir
    )
    if not stats["enabled"]:
        click.echo(f"distill: distill.enabled is false; nothing to translate -> {out_dir}/{OFF}")
        return
    resumed = f", {stats['chunks_resumed']} chunks from an earlier run" if stats["chunks_resumed"] else ""
    click.echo(
        f"distill: {stats['pairs']:,} pairs ({stats['empty_translations']} empty translations left out) "
        f"in {stats['seconds']} s{resumed} -> {out_dir}"
    )
