"""Stage decode: translate the clean val set and every clean test set with the trained model.

Output (one directory, written atomically): val.hyp and test/<name>.hyp, one
per clean/test/<name>.src, the detokenized 1-best translations, line-aligned
with their sources (an empty source line gives an empty hypothesis); with
decode.n_best > 1 also .nbest files in the translate command's
`i ||| hypothesis ||| score` format; and stats.json: the device and decoding
settings (and with decode.ensemble, "ensemble": each member's path and the sha256 of its
weights), "val" and "test": {"<name>": ...}, each with sentences, seconds,
sentences_per_s, tokens_per_s (1-best output subwords, EOS included) and
truncated (inputs longer than the model takes, see search.fit_to_model).

Decoding runs through the same Translator as `translate`, so the stage scores
exactly what a user of the model directory gets; the settings are the
`decode` section of params.yaml, not the ones saved in the model.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import click

from pipeline import files, lineage
from pipeline.decoding.search import SearchStats
from pipeline.decoding.translator import Translator, nbest_row, one_line
from pipeline.devices import DEVICES
from pipeline.errors import UserError
from pipeline.params import DecodeParams
from pipeline.stages.options import clean_option, directory, load_params, model_option, params_option

VAL = "val"
TEST_DIR = "test"  # clean/test/<name>.src -> test/<name>.hyp


def read_sources(clean_dir: Path) -> dict[str, list[str]]:
    """The sources by output path stem: "val", then "test/<name>" for each test set, sorted by name."""
    rerun = "run the clean stage first (`python -m pipeline clean`)"
    val, test_dir = clean_dir / f"{VAL}.src", clean_dir / TEST_DIR
    if not val.is_file():
        raise UserError(f"{val}: missing; {rerun}")
    tests = sorted(test_dir.glob("*.src")) if test_dir.is_dir() else []
    if not tests:
        raise UserError(f"{test_dir}: no test sets (<name>.src) in it; {rerun}")
    sources = {VAL: files.read_lines(val)}
    sources |= {f"{TEST_DIR}/{path.stem}": files.read_lines(path) for path in tests}
    return sources


def decode_split(
    translator: Translator, lines: list[str], n_best: int, out_dir: Path, stem: str
) -> dict[str, Any]:
    """Write out_dir/{stem}.hyp (and .nbest); return the set's speed and truncation stats."""
    stats = SearchStats()
    start = time.perf_counter()
    nbest = translator.translate_nbest(lines, n_best, stats=stats)
    seconds = time.perf_counter() - start
    hyps = [one_line(n[0].text) for n in nbest]
    assert len(hyps) == len(lines), f"{stem}: {len(hyps)} hypotheses for {len(lines)} sources"
    files.write_lines(out_dir / f"{stem}.hyp", hyps)
    if n_best > 1:
        rows = [nbest_row(i, t) for i, ts in enumerate(nbest) for t in ts]
        files.write_lines(out_dir / f"{stem}.nbest", rows)
    return {
        "sentences": len(lines),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(lines) / max(seconds, 1e-9), 2),
        "tokens_per_s": round(stats.out_tokens / max(seconds, 1e-9), 2),
        "truncated": stats.truncated,
    }


def decode(
    settings: DecodeParams, model_dir: Path, clean_dir: Path, out_dir: Path, device: str = "auto"
) -> dict[str, Any]:
    """Translate clean_dir's val.src and test/*.src with model_dir into out_dir (atomically); returns
    stats.json."""
    sources = read_sources(clean_dir)
    translator = Translator.from_dir(model_dir, device, settings=settings)
    report: dict[str, Any] = {"device": str(translator.device), "decode": dataclasses.asdict(settings)}
    if settings.ensemble:  # DVC tracks the paths (params), not the weights: record which these were
        report["ensemble"] = [
            {"path": path, "model_sha256": lineage.sha256(Path(path) / lineage.MODEL_FILE)}
            for path in settings.ensemble
        ]
    with files.atomic_path(out_dir) as tmp:
        (tmp / TEST_DIR).mkdir(parents=True)
        for stem, lines in sources.items():
            stats = decode_split(translator, lines, settings.n_best, tmp, stem)
            if stem == VAL:
                report[VAL] = stats
            else:
                report.setdefault(TEST_DIR, {})[stem.split("/", 1)[1]] = stats
        files.write_json(tmp / "stats.json", report)
    return report


def stats_lines(report: dict[str, Any]) -> list[str]:
    """One line per set: val, then each test set."""
    sets = [(VAL, report[VAL]), *((f"{TEST_DIR}/{n}", s) for n, s in report[TEST_DIR].items())]
    return [
        f"{name}: {s['sentences']} sentences in {s['seconds']} s "
        f"({s['sentences_per_s']} sentences/s, {s['tokens_per_s']} tokens/s), {s['truncated']} truncated"
        for name, s in sets
    ]


@click.command("decode")
@params_option
@model_option
@clean_option
@directory(
    "out",
    required=True,
    help="Where to write val.hyp, test/<name>.hyp and stats.json.",
)
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
def command(params_file: Path, model_dir: Path, clean_dir: Path, out_dir: Path, device: str) -> None:
    """Translate the val source and every test set's (stage decode)."""
    params = load_params(params_file)
    report = decode(params.decode, model_dir, clean_dir, out_dir, device)
    for line in stats_lines(report):
        click.echo(line, err=True)
