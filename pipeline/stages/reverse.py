"""Stage `reverse`: the reverse model that back-translation translates with (data.tgt_lang -> src_lang).

    python -m pipeline reverse --params params.yaml --raw data/raw --work data/reverse-work \\
        --out data/reverse --log reports/reverse

The same stages as the forward model's, run as the same commands on the download stage's bitext
with its sides swapped: clean (the forward's clean settings), then bpe, binarize and train with
the reverse model's own settings (backtranslation.reverse.bpe, .model, .train), which --work's
params.yaml holds. Since those are its own, `dvc repro` retrains it only when they, the clean
settings or the bitext change, never for a change to the forward model. --work (the swapped
corpus, its clean text, vocabulary, binarized data and checkpoints) is kept across runs, so a
killed training resumes exactly as the train stage does (docs/exact-resume.md). With
backtranslation.enabled false it trains nothing and writes only off.json to --out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import click
import yaml

from pipeline import files
from pipeline import params as P
from pipeline.data import artifacts
from pipeline.data.planning import plan_monolingual
from pipeline.data.tags import split_tags, synthetic_prefix
from pipeline.errors import UserError
from pipeline.files import SIDES
from pipeline.fingerprint import fingerprint
from pipeline.stages.options import directory, load_params, params_option, run_stage

# The stage commands it runs, in children: dvc.yaml lists their code among its deps (a test checks).
RUNS = ("clean", "bpe", "binarize", "train")
OFF = artifacts.REVERSE_OFF  # the whole of --out while back-translation is off
KEY = "data_key.json"  # what --work's data steps were made from: equal, they are not redone
WHO = "reverse: `python -m pipeline {command}` on the swapped corpus"
PARAMS = "params.yaml"  # in --work: the settings the reverse model's stages run with (reverse_params)


def reverse_params(params: P.Params) -> P.Params:
    """The settings the reverse model trains with: the languages swapped, its own bpe, model and
    train, and no back-translation of its own. The score rule's models swap too, so that the
    swapped pairs get the same dual score; with a forward model only, which cannot score the
    pairs the other way round, the reverse corpus goes without the score rule."""
    r, d, bt = params.backtranslation.reverse, params.data, params.backtranslation
    data = dataclasses.replace(d, src_lang=d.tgt_lang, tgt_lang=d.src_lang)
    off = dataclasses.replace(bt, enabled=False, mono=())
    swapped = dataclasses.replace(params, data=data, backtranslation=off, clean=_swapped_score(params.clean))
    return dataclasses.replace(swapped, bpe=r.bpe, model=r.model, train=r.train)


def _swapped_score(c: P.CleanParams) -> P.CleanParams:
    score = c.score
    if score.forward is None:
        return c
    if score.reverse is not None:
        return dataclasses.replace(
            c, score=dataclasses.replace(score, forward=score.reverse, reverse=score.forward)
        )

    def unscored(rules: tuple[P.FilterRule, ...]) -> tuple[P.FilterRule, ...]:
        return tuple(rule for rule in rules if rule != "score")

    return dataclasses.replace(
        c,
        filters=unscored(c.filters),
        web_filters=unscored(c.web_filters),
        source_filters={name: unscored(rules) for name, rules in c.source_filters.items()},
        score=dataclasses.replace(score, forward=None, drop_worst=0.0, max_score=None),
    )


def swap_raw(raw: Path, out: Path) -> None:
    """raw's splits with their sides swapped (a source's target-language tag dropped: the reverse
    model's target is one language), and its manifest to match, into `out` atomically."""
    manifest: dict[str, Any] = dict(artifacts.manifest(raw))
    if not manifest:
        raise UserError(f"{raw}/{artifacts.MANIFEST}: missing; run the download stage first")
    tests = sorted((raw / "test").glob("*.src"))
    stems = ["train", "val", *(f"test/{p.name.removesuffix('.src')}" for p in tests)]
    with files.atomic_path(out) as tmp:
        (tmp / "test").mkdir(parents=True)
        for stem in stems:
            for side in SIDES:
                if not (raw / f"{stem}.{side}").is_file():
                    raise UserError(f"{raw / f'{stem}.{side}'}: missing; run the download stage first")
            with files.PairedWriter(tmp / stem) as w:
                for lines in files.line_chunks(raw / f"{stem}.tgt"):
                    w.write_lines("src", lines)
                for lines in files.line_chunks(raw / f"{stem}.src"):
                    w.write_lines("tgt", split_tags(lines)[1])
        manifest["src_lang"], manifest["tgt_lang"] = manifest.get("tgt_lang"), manifest.get("src_lang")
        manifest.pop("tags", None)
        for records in manifest.get("splits", {}).values():
            for record in records:
                if "tgt_lang" in record:
                    record["src_lang"], record["tgt_lang"] = record["tgt_lang"], record["src_lang"]
        files.write_json(tmp / artifacts.MANIFEST, manifest)


def data_key(params: P.Params, raw: Path) -> dict[str, Any]:
    """What the reverse model's data steps depend on: the bitext (its manifest and file sizes), the
    clean settings, the reverse vocabulary's, and the code of this stage and of those it runs on
    the data (a fix to clean's rules remakes the corpus; train's own code is its fingerprint's)."""
    sizes = {str(p.relative_to(raw)): p.stat().st_size for p in sorted(raw.rglob("*")) if p.is_file()}
    manifest = hashlib.sha256((raw / artifacts.MANIFEST).read_bytes()).hexdigest()
    clean, bpe = (dataclasses.asdict(s) for s in (params.clean, params.backtranslation.reverse.bpe))
    code = {m: fingerprint(f"pipeline.stages.{m}") for m in ("reverse", "clean", "bpe", "binarize")}
    key = {"manifest_sha256": manifest, "sizes": sizes, "clean": clean, "bpe": bpe, "code": code}
    return json.loads(json.dumps(key))  # as KEY stores it: tuples (clean's rule lists) become lists


def check_sources(params: P.Params, raw: Path) -> None:
    """Refuse, before anything trains, what back-translation could not use: a backtranslation.mono
    entry that names nothing or has no side in data.tgt_lang, a bitext from several source
    languages (the reverse model would translate into all of them, untold which), and a tag the
    synthetic sources would need and the vocabulary will lack."""
    for i, name in enumerate(params.backtranslation.mono):
        plan_monolingual(name, f"backtranslation.mono[{i}]", params.data)
    d = params.data
    sources = sorted({(d.sources[n].src_lang if n in d.sources else None) or d.src_lang for n in d.train})
    if len(sources) > 1:
        raise UserError(
            f"back-translation: the train sources translate from {', '.join(sources)}; its reverse model "
            f"needs one language to translate into: list sources from {params.data.src_lang} only"
        )
    synthetic_prefix(artifacts.manifest(raw).get("tags", []), d.tgt_lang, params.backtranslation.tag)


def prepare(params: P.Params, raw: Path, work: Path) -> None:
    """work/{raw,clean,bpe,bin}: the swapped bitext, cleaned, its vocabulary and binarized; kept as
    they are when the data key says nothing changed (a resumed training needs them identical)."""
    key = data_key(params, raw)
    key_file = work / KEY
    if key_file.is_file() and json.loads(key_file.read_text()) == key and (work / "bin").is_dir():
        click.echo(f"reverse: the swapped corpus in {work} is up to date", err=True)
        return
    key_file.unlink(missing_ok=True)
    swap_raw(raw, work / "raw")
    run_stage(WHO, "clean", "--params", work / PARAMS, "--raw", work / "raw", "--out", work / "clean")
    run_stage(WHO, "bpe", "--params", work / PARAMS, "--clean", work / "clean", "--out", work / "bpe")
    args = ("--clean", work / "clean", "--bpe", work / "bpe", "--out", work / "bin")
    run_stage(WHO, "binarize", "--params", work / PARAMS, *args)
    files.write_json(key_file, key)


def reverse(params: P.Params, raw: Path, work: Path, out: Path, log: Path) -> dict[str, Any]:
    """Train (or resume, or find finished) the reverse model into `out`; -> its summary."""
    if not params.backtranslation.enabled:
        note = {"enabled": False, "why": "backtranslation.enabled is false: no reverse model"}
        for path in (out, log):
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
        files.write_json(out / OFF, note)
        files.write_json(log / "summary.json", note)
        work.mkdir(parents=True, exist_ok=True)
        return note
    check_sources(params, raw)
    work.mkdir(parents=True, exist_ok=True)
    (work / PARAMS).write_text(yaml.safe_dump(reverse_params(params).to_dict(), sort_keys=False))
    prepare(params, raw, work)
    data = ("--bin", work / "bin", "--bpe", work / "bpe", "--clean", work / "clean")
    outs = ("--out", out, "--checkpoints", work / "checkpoints", "--log", log)
    run_stage(
        WHO, "train", "--params", work / PARAMS, *data, *outs, "--on-change", "restart", "--no-tracking"
    )
    return json.loads((log / "summary.json").read_text())


@click.command("reverse")
@params_option
@directory("raw", required=True, help="The download stage's output (data/raw): the bitext, reversed here.")
@directory("work", required=True, help="Scratch kept across runs: the swapped corpus and checkpoints.")
@directory("out", required=True, help="Where to write the reverse model directory.")
@directory("log", required=True, help="Where to write its steps.tsv, valid.tsv and summary.json.")
def command(params_file: Path, raw_dir: Path, work_dir: Path, out_dir: Path, log_dir: Path) -> None:
    """Train the reverse model that back-translation translates with (nothing when it is off)."""
    params = load_params(params_file)
    summary = reverse(params, raw_dir, work_dir, out_dir, log_dir)
    if not params.backtranslation.enabled:
        click.echo(f"reverse: backtranslation.enabled is false; nothing to train -> {out_dir}/{OFF}")
        return
    click.echo(
        f"reverse: {params.data.tgt_lang}->{params.data.src_lang}, {summary['steps']} updates, best val "
        f"BLEU {summary['best_val_bleu']} at step {summary['best_step']} -> {out_dir}"
    )
