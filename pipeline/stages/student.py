"""Stage `student`: a small model trained on its teachers' translations, decoded and scored.

    python -m pipeline student --params params.yaml --distill data/distill --clean data/clean \
        --bpe data/bpe --refs data/raw --work data/student-work --out data/student \
        --hyps data/student-decode --ct2 data/student-ct2 --ct2-hyps data/student-ct2-decode \
        --log reports/student

The teacher's stages (binarize, train, decode, score, export-ct2) run as commands with the
student's own settings (distill.student), which --work's params.yaml holds, on the distilled
corpus (and the original pairs with distill.original) in the teacher's vocabulary; its int8
export is decoded with CTranslate2 and scored too. Its MLflow run sits under its first
teacher's. The teacher's settings retrain nothing here until they change the distilled corpus.
--work is kept across runs, so a killed training resumes. Off: only off.json. docs/distillation.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import click
import yaml

from pipeline import files, lineage
from pipeline import params as P
from pipeline.data import artifacts
from pipeline.errors import UserError
from pipeline.fingerprint import fingerprint
from pipeline.stages.options import bpe_option, clean_option, directory, load_params, params_option, run_stage

# The stage commands it runs, in children: dvc.yaml lists their code among its deps (a test checks).
RUNS = ("binarize", "train", "decode", "score", "export_ct2")
OFF = artifacts.REVERSE_OFF  # the whole of --out while distillation is off
SOURCE = "distilled"  # the distilled pairs' name as a train source (distill.student.train.source_weights)
KEY = "data_key.json"  # what --work's corpus was made from: equal, it is not remade
PARAMS = "params.yaml"  # in --work: the settings the student's stages run with (student_params)
WHO = "student: `python -m pipeline {command}`"


def student_params(params: P.Params) -> P.Params:
    """The settings the student's stages run with: its shape, train and decode sections, the
    distilled pairs as its first train source, and no back-translation or distillation of its own."""
    s, d = params.distill.student, params.data
    trained = (SOURCE, *d.train) if params.distill.original else (SOURCE,)
    return dataclasses.replace(
        params,
        data=dataclasses.replace(d, train=trained),
        clean=dataclasses.replace(params.clean, source_filters={}),  # its corpus is cleaned already
        model=s.shaped_model,
        train=s.train,
        decode=s.decode,
        backtranslation=dataclasses.replace(params.backtranslation, enabled=False, mono=()),
        distill=dataclasses.replace(params.distill, enabled=False),
    )


def corpus_key(params: P.Params, distilled: Path, clean: Path) -> dict[str, Any]:
    """What the student's corpus and its binarized data depend on: the distilled pairs' and the
    clean stage's records and sizes, distill.original, and the code that makes and encodes them."""
    sizes = {
        str(path): path.stat().st_size
        for folder in (distilled, clean)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
    records = [distilled / lineage.TEACHERS_FILE, clean / artifacts.CLEAN_STATS]
    digests = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in records if p.is_file()}
    code = {m: fingerprint(f"pipeline.stages.{m}") for m in ("student", "binarize")}
    key = {"sizes": sizes, "records": digests, "original": params.distill.original, "code": code}
    return json.loads(json.dumps(key))


def write_corpus(params: P.Params, distilled: Path, clean: Path, out: Path) -> None:
    """out/: train.{src,tgt} (the distilled pairs, then the original ones with distill.original),
    clean's val and test sets, a stats.json listing the train sources, and teachers.json."""
    counted = (artifacts.read_record(distilled / artifacts.CLEAN_STATS) or {}).get("pairs")
    if not isinstance(counted, int):
        raise UserError(
            f"{distilled}/stats.json: no count of pairs; rerun the distill stage (dvc repro -f distill)"
        )
    sources: dict[str, Any] = {SOURCE: {"lines_out": counted}}
    parts = [distilled / "train"]
    if params.distill.original:
        parts.append(clean / "train")
        stats = artifacts.read_record(clean / artifacts.CLEAN_STATS) or {}
        sources |= (stats.get("train") or {}).get("sources") or {}
    with files.atomic_path(out) as tmp:
        tmp.mkdir()
        with files.PairedWriter(tmp / "train") as w:
            for stem in parts:
                for side in files.SIDES:
                    for lines in files.line_chunks(stem.with_name(f"{stem.name}.{side}")):
                        w.write_lines(side, lines)
        for side in files.SIDES:
            shutil.copyfile(clean / f"val.{side}", tmp / f"val.{side}")
        shutil.copytree(clean / "test", tmp / "test")
        files.write_json(tmp / artifacts.CLEAN_STATS, {"train": {"sources": sources}})
        shutil.copyfile(distilled / lineage.TEACHERS_FILE, tmp / lineage.TEACHERS_FILE)


def prepare(params: P.Params, distilled: Path, clean: Path, bpe: Path, work: Path) -> None:
    """work/{clean,bin}: the student's corpus and its binarized data; kept as they are when the key
    says nothing changed (a resumed training needs them identical)."""
    key = corpus_key(params, distilled, clean)
    key_file = work / KEY
    if key_file.is_file() and json.loads(key_file.read_text()) == key and (work / "bin").is_dir():
        click.echo(f"student: its corpus in {work} is up to date", err=True)
        return
    key_file.unlink(missing_ok=True)
    write_corpus(params, distilled, clean, work / "clean")
    args = ("--clean", work / "clean", "--bpe", bpe, "--out", work / "bin")
    run_stage(WHO, "binarize", "--params", work / PARAMS, *args)
    files.write_json(key_file, key)


def student(
    params: P.Params, distilled: Path, clean: Path, bpe: Path, work: Path, outs: Outputs
) -> dict[str, Any]:
    """Train (or resume, or find finished) the student into outs.model, decode and score it."""
    if not params.distill.enabled:
        return _off(work, outs)
    if (distilled / OFF).is_file() or not (distilled / "train.src").is_file():
        raise UserError(
            f"{distilled}: no distilled corpus in it; run the distill stage first (`dvc repro distill`)"
        )
    q = params.distill.student.quantization
    if q != "none" and importlib.util.find_spec("ctranslate2") is None:
        raise UserError(
            f"distill.student.quantization: {q} exports the student with CTranslate2, which is not "
            "installed: pip install -e '.[ct2]', or set it to none"
        )
    work.mkdir(parents=True, exist_ok=True)
    settings = work / PARAMS
    settings.write_text(yaml.safe_dump(student_params(params).to_dict(), sort_keys=False))
    prepare(params, distilled, clean, bpe, work)
    data = ("--bin", work / "bin", "--bpe", bpe, "--clean", work / "clean")
    ckpt = ("--checkpoints", work / "checkpoints", "--on-change", "restart")
    run_stage(WHO, "train", "--params", settings, *data, *ckpt, "--out", outs.model, "--log", outs.log)
    hyps = ("--model", outs.model, "--clean", work / "clean", "--out", outs.decode)
    run_stage(WHO, "decode", "--params", settings, *hyps)
    scored = ("--decode", outs.decode, "--refs", outs.refs, "--model", outs.model)
    run_stage(WHO, "score", "--params", settings, *scored, "--out", outs.log / "metrics.json")
    if params.distill.student.quantization != "none":
        quantized(params, work, outs)
    return json.loads((outs.log / "summary.json").read_text())


def quantized(params: P.Params, work: Path, outs: Outputs) -> None:
    """The student exported to CTranslate2 with distill.student.quantization's weights, its val and
    test translations, their scores (metrics-<quantization>.json), and those in the student's MLflow
    run as <quantization>.dev_bleu, <quantization>.test.<name>.bleu, ... (score --prefix)."""
    q = params.distill.student.quantization
    run_stage(WHO, "export-ct2", "--model", outs.model, "--out", outs.quantized, "--quantization", q)
    from pipeline.decoding.sets import decode_sets, read_sources
    from pipeline.interop.ct2 import CT2Translator

    settings = params.distill.student.decode
    translator = CT2Translator(outs.quantized, "cpu", settings)
    report = {
        "device": "cpu",
        "backend": "ctranslate2",
        "quantization": q,
        "decode": dataclasses.asdict(settings),
    }
    decode_sets(translator, read_sources(work / "clean"), settings.n_best, outs.quantized_decode, report)
    scored = ("--decode", outs.quantized_decode, "--refs", outs.refs, "--model", outs.model)
    run_stage(WHO, "score", *scored, "--prefix", f"{q}.", "--out", outs.log / f"metrics-{q}.json")


def _off(work: Path, outs: Outputs) -> dict[str, Any]:
    """While distillation is off: off.json as the model directory, and nothing else."""
    note = {"enabled": False, "why": "distill.enabled is false: no student"}
    for path in (outs.model, outs.decode, outs.quantized, outs.quantized_decode, outs.log):
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    files.write_json(outs.model / OFF, note)
    files.write_json(outs.log / "summary.json", note)
    work.mkdir(parents=True, exist_ok=True)
    return note


@dataclasses.dataclass(frozen=True)
class Outputs:
    model: Path
    decode: Path
    log: Path  # steps.tsv, valid.tsv, summary.json and metrics.json
    refs: Path  # the download stage's output: the references scored against
    quantized: Path  # its CTranslate2 export
    quantized_decode: Path  # that export's translations of the val and test sets


@click.command("student")
@params_option
@directory("distill", required=True, help="The distill stage's output (data/distill).")
@clean_option
@bpe_option
@directory("refs", required=True, help="The references: the download stage's output (data/raw).")
@directory("work", required=True, help="Scratch kept across runs: the student's corpus and checkpoints.")
@directory("out", required=True, help="Where to write the student's model directory.")
@directory("hyps", required=True, help="Where to write its translations of the val and test sets.")
@directory("ct2", required=True, help="Where to write its CTranslate2 export (distill.student.quantization).")
@directory("ct2-hyps", required=True, help="Where to write that export's translations.")
@directory(
    "log", required=True, help="Where to write its steps.tsv, valid.tsv, summary.json and metrics.json."
)
def command(
    params_file: Path,
    distill_dir: Path,
    clean_dir: Path,
    bpe_dir: Path,
    refs_dir: Path,
    work_dir: Path,
    out_dir: Path,
    hyps_dir: Path,
    ct2_dir: Path,
    ct2_hyps_dir: Path,
    log_dir: Path,
) -> None:
    """Train the student on the distilled corpus, then decode and score it (nothing when it is off)."""
    params = load_params(params_file)
    outs = Outputs(out_dir, hyps_dir, log_dir, refs_dir, ct2_dir, ct2_hyps_dir)
    summary = student(params, distill_dir, clean_dir, bpe_dir, work_dir, outs)
    if not params.distill.enabled:
        click.echo(f"student: distill.enabled is false; nothing to train -> {out_dir}/{OFF}")
        return
    click.echo(
        f"student: {summary['steps']} updates, best val BLEU {summary['best_val_bleu']} at step "
        f"{summary['best_step']} -> {out_dir}, scores in {log_dir}/metrics.json"
    )
