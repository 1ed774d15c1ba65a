"""Stage `backtranslate`: synthetic training pairs from target-language text (Sennrich et al. 2016).

    python -m pipeline backtranslate --params params.yaml --reverse data/reverse --out data/bt

Reads backtranslation.mono (pipeline/data/mono.py), translates it into the source language with
the reverse stage's model, as backtranslation.decode says (sampling by default: Edunov et al.
2018 found it beats beam search except in very poor settings), and writes the pairs as one train
source, `backtranslated`, that the clean stage appends to data/raw's: filtered, deduplicated and
decontaminated like real pairs, and weighted by train.source_weights.backtranslated. With
backtranslation.tag each synthetic source begins with <BT> (Caswell et al. 2019), behind the
target-language tag where the model has those. With back-translation off, the source is empty and
the clean stage's output is what it would be without this stage.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from pipeline import files
from pipeline import params as P
from pipeline.data import artifacts
from pipeline.data.tags import BT_TAG, synthetic_prefix
from pipeline.devices import DEVICES
from pipeline.errors import UserError
from pipeline.stages.options import directory, load_params, out_dir_option, params_option

SOURCE = P.BT_SOURCE  # the train source's name: train.source_weights.backtranslated weighs it


def prefix(params: P.Params, raw: Path) -> str:
    """What each synthetic source begins with (pipeline.data.tags.synthetic_prefix)."""
    tags = artifacts.manifest(raw).get("tags", [])
    return synthetic_prefix(tags, params.data.tgt_lang, params.backtranslation.tag)


def backtranslate(
    params: P.Params, raw: Path, reverse_dir: Path, out: Path, device: str = "auto"
) -> dict[str, Any]:
    """Write out/{train.src,train.tgt,manifest.json,stats.json} atomically; -> stats.json."""
    bt = params.backtranslation
    if not bt.enabled:
        with files.atomic_path(out) as tmp:
            tmp.mkdir()
            files.PairedWriter(tmp / "train").close()
            files.write_json(tmp / artifacts.MANIFEST, {"splits": {"train": []}})
            stats: dict[str, Any] = {"enabled": False}
            files.write_json(tmp / "stats.json", stats)
        return stats
    if (reverse_dir / artifacts.REVERSE_OFF).is_file() or not (reverse_dir / "model.pt").is_file():
        raise UserError(
            f"{reverse_dir}: no reverse model in it; run the reverse stage first (`dvc repro reverse`)"
        )
    from pipeline.data.mono import read_mono
    from pipeline.data.reading import resolve_mirror
    from pipeline.decoding.translator import Translator

    lead = prefix(params, raw)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.mono.", dir=out.parent) as scratch:
        mono = read_mono(params, resolve_mirror(params.data), Path(scratch))
    if not mono.lines:
        raise UserError(
            "backtranslation.mono: no line left to translate (all empty, longer than clean.max_words, or "
            "duplicates); check the sources"
        )
    translator = Translator.from_dir(reverse_dir, device, settings=bt.decode)
    tagged = bool(artifacts.manifest(raw).get("tags"))
    with files.atomic_path(out) as tmp:
        tmp.mkdir()
        pairs, empty = _write_pairs(translator, mono.lines, lead, tmp / "train")
        record: dict[str, Any] = {"name": SOURCE, "catalog": False, "lines": pairs, "synthetic": True}
        if tagged:  # sources of several pairs: this one is data.src_lang-data.tgt_lang's
            record["src_lang"], record["tgt_lang"] = params.data.src_lang, params.data.tgt_lang
        manifest: dict[str, Any] = {"splits": {"train": [record]}}
        if bt.tag:
            manifest["tags"] = [BT_TAG]
        files.write_json(tmp / artifacts.MANIFEST, manifest)
        stats = {
            "enabled": True,
            "mono": mono.stats,
            "pairs": pairs,
            "empty_translations": empty,  # dropped: the reverse model wrote nothing for the line
            "prefix": lead,
            "decode": dataclasses.asdict(bt.decode),
            "seconds": round(time.perf_counter() - start, 1),
        }
        files.write_json(tmp / "stats.json", stats)
    return stats


def _write_pairs(translator: Any, lines: list[str], lead: str, stem: Path) -> tuple[int, int]:
    """stem.{src,tgt}: each line's translation behind `lead`, and the line; -> (pairs written, lines
    dropped because the reverse model wrote nothing for them)."""
    pairs = empty = done = 0
    with files.PairedWriter(stem) as w:
        for translated in files.batched(translator.translate_corpus(lines), 4096):
            kept = [(s, t) for s, t in zip(translated, lines[done : done + len(translated)]) if s.strip()]
            w.write_lines("src", [lead + s for s, _ in kept])
            w.write_lines("tgt", [t for _, t in kept])
            done += len(translated)
            pairs, empty = pairs + len(kept), empty + len(translated) - len(kept)
            click.echo(f"backtranslate: {done:,} of {len(lines):,} lines", err=True)
    return pairs, empty


@click.command("backtranslate")
@params_option
@directory("raw", default=Path("data/raw"), show_default=True, help="The download stage's output (its tags).")
@directory("reverse", required=True, help="The reverse stage's model directory (data/reverse).")
@out_dir_option("synthetic pairs'")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
def command(params_file: Path, raw_dir: Path, reverse_dir: Path, out_dir: Path, device: str) -> None:
    """Translate backtranslation.mono with the reverse model into synthetic training pairs."""
    params = load_params(params_file)
    stats = backtranslate(params, raw_dir, reverse_dir, out_dir, device)
    if not stats["enabled"]:
        click.echo(f"backtranslate: backtranslation.enabled is false; no synthetic pairs -> {out_dir}")
        return
    click.echo(f"backtranslate: {stats['pairs']:,} synthetic pairs in {stats['seconds']} s -> {out_dir}")
