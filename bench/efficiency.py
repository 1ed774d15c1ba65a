"""Teachers and their student side by side, in the terms of the WMT efficiency task.

    python -m bench.efficiency --teacher data/model --teacher M2 --teacher M3 \\
        --student data/student --student-ct2 data/student-ct2 --original O --clean data/clean --refs data/raw

Four systems: the teacher ensemble and one teacher (torch, at distill.decode's beam), the student
in fp32 (torch) and its CTranslate2 export (int8; both at distill.student.decode's beam); with
--original a fifth, the student's shape trained on the original pairs alone, against which the
students are compared too (what distillation gained, not the shape). Each is
measured in a process of its own, in a shuffled order: BLEU and chrF of every test set with their
intervals and sacreBLEU's paired bootstrap against the teacher ensemble; its files' size in MB;
source words a second on one core and on all of them (every test set); the median latency of one
sentence at batch 1; the process's peak RSS. Writes reports/efficiency.md and .json.
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from pipeline import files
from pipeline import params as P
from pipeline.decoding.sets import TEST_DIR, read_sources
from pipeline.decoding.translator import TextTranslator
from pipeline.machine import machine_info
from pipeline.reporting.hypotheses import RunHypotheses
from pipeline.reporting.significance import compare, comparison_markdown, sha256_of
from pipeline.reporting.tables import markdown_table

LATENCY_LINES = 50  # single sentences timed at batch 1
ONE_CORE_LINES = 300  # lines of the first test set timed on one core
REPO = Path(__file__).resolve().parents[1]  # the child process imports bench from here


ORIGINAL = "same shape, original data"


def systems(
    teachers: list[Path], student: Path, student_ct2: Path | None, original: Path | None, params: P.Params
) -> list[dict]:
    """What each system is: a name, its backend, its model directories and its beam; the first is
    the baseline (the ensemble, or the one teacher where there is one)."""
    teacher_beam, student_beam = params.distill.decode.beam, params.distill.student.decode.beam
    found = [{"name": "one teacher", "backend": "torch", "models": teachers[:1], "beam": teacher_beam}]
    if len(teachers) > 1:
        name = f"teacher ensemble ({len(teachers)})"
        found.insert(0, {"name": name, "backend": "torch", "models": teachers, "beam": teacher_beam})
    found.append({"name": "student, fp32", "backend": "torch", "models": [student], "beam": student_beam})
    if student_ct2 is not None:
        quantization = json.loads((student_ct2 / "pipeline.json").read_text())["quantization"]
        name = f"student, {quantization}"
        found.append({"name": name, "backend": "ctranslate2", "models": [student_ct2], "beam": student_beam})
    if original is not None:
        found.append({"name": ORIGINAL, "backend": "torch", "models": [original], "beam": student_beam})
    return found


def size_mb(system: dict) -> float:
    name = "model.pt" if system["backend"] == "torch" else "model.bin"
    return sum((Path(m) / name).stat().st_size for m in system["models"]) / 1e6


def _translator(system: dict, threads: int) -> TextTranslator:
    """The system's translator on `threads` threads: CTranslate2's, or ours (an ensemble of several)."""
    import torch

    from pipeline.decoding.translator import Translator
    from pipeline.interop.ct2 import CT2Translator

    torch.set_num_threads(threads)
    first, *others = map(Path, system["models"])
    if system["backend"] == "ctranslate2":
        return CT2Translator(first, "cpu", threads=threads)
    workers = 2 if threads >= 2 else 1
    return Translator.from_dir(first, "cpu", ensemble=[str(m) for m in others], workers=workers)


def measure_one(system: dict, clean: Path, threads: int) -> dict[str, Any]:
    """One system in this process: its test sets' translations, speed, latency and peak RSS."""
    sets = {k: v for k, v in read_sources(clean).items() if k.startswith(f"{TEST_DIR}/")}
    first = next(iter(sets.values()))
    translator = _translator(system, threads)
    translator.translate(first[:20], beam=system["beam"])  # warm-up: kernels chosen, caches made
    start = time.perf_counter()
    hyps = {key: translator.translate(lines, beam=system["beam"]) for key, lines in sets.items()}
    words = sum(len(line.split()) for lines in sets.values() for line in lines)
    all_cores = words / (time.perf_counter() - start)
    latency = []
    for line in first[:LATENCY_LINES]:
        start = time.perf_counter()
        translator.translate([line], beam=system["beam"])
        latency.append(time.perf_counter() - start)
    one = _translator(system, 1)
    one.translate(first[:20], beam=system["beam"])
    start = time.perf_counter()
    one.translate(first[:ONE_CORE_LINES], beam=system["beam"])
    one_core = sum(len(line.split()) for line in first[:ONE_CORE_LINES]) / (time.perf_counter() - start)
    return {
        "hyps": hyps,
        "words_per_s": all_cores,
        "words_per_s_one_core": one_core,
        "latency_ms": 1000 * statistics.median(latency),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def measure(system: dict, clean: Path, threads: int, scratch: Path) -> dict[str, Any]:
    """measure_one in a child process, so that each system's peak RSS is its own."""
    spec, out = scratch / "system.json", scratch / "measured.json"
    files.write_json(spec, {**system, "models": [str(m) for m in system["models"]]})
    args = ["one", "--system", str(spec), "--clean", str(clean), "--threads", str(threads), "--out", str(out)]
    path = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    subprocess.run([sys.executable, "-m", "bench.efficiency", *args], check=True, env=env)
    return json.loads(out.read_text(encoding="utf-8"))


@click.group(invoke_without_command=True)
@click.pass_context
@click.option(
    "--teacher", "teachers", multiple=True, type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.option("--student", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--student-ct2", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None)
@click.option(
    "--original",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The student's shape trained on the original pairs alone: the students are compared with it too.",
)
@click.option("--clean", type=click.Path(file_okay=False, path_type=Path), default=Path("data/clean"))
@click.option("--refs", type=click.Path(file_okay=False, path_type=Path), default=Path("data/raw"))
@click.option(
    "--params", "params_file", type=click.Path(dir_okay=False, path_type=Path), default="params.yaml"
)
@click.option(
    "--threads", type=click.IntRange(min=1), default=None, help="All cores: default os.cpu_count()."
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("reports/efficiency.md"))
@click.option("--seed", type=int, default=1, show_default=True, help="The order systems are measured in.")
def main(ctx: click.Context, **options: Any) -> None:
    """The efficiency table: teachers, student, int8 student, measured side by side."""
    if ctx.invoked_subcommand is None:
        run(**options)


def run(
    teachers: tuple[Path, ...],
    student: Path | None,
    student_ct2: Path | None,
    original: Path | None,
    clean: Path,
    refs: Path,
    params_file: Path,
    threads: int | None,
    out: Path,
    seed: int,
) -> None:
    import tempfile

    if not teachers or student is None:
        raise click.UsageError("give --teacher (one or more) and --student")
    # checked here, not by click: the child process `one` shares the group's options but needs neither
    for hint, folder, stage in (("--clean", clean, "clean"), ("--refs", refs, "download")):
        if not folder.is_dir():
            raise click.BadParameter(
                f"no directory {folder}: run dvc repro {stage}, or name one", param_hint=hint
            )
    params = P.load(params_file)
    threads = threads or os.cpu_count() or 1
    chosen = systems(list(teachers), student, student_ct2, original, params)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for system in random.Random(seed).sample(chosen, len(chosen)):
            click.echo(f"efficiency: {system['name']}", err=True)
            results[system["name"]] = measure(system, clean, threads, Path(scratch))
    write_report([s["name"] for s in chosen], chosen, results, refs, threads, out)


def write_report(
    names: list[str], chosen: list[dict], results: dict[str, dict], refs: Path, threads: int, out: Path
) -> None:
    shas = {k: sha256_of(refs / f"{k}.tgt") for k in next(iter(results.values()))["hyps"]}
    runs = [RunHypotheses(n, results[n]["hyps"], shas) for n in names]
    comparison = compare(runs[0], runs[1:], refs)
    by_name = {r.name: r for r in runs}
    students = [r for r in runs if r.name.startswith("student")]
    gained = compare(by_name[ORIGINAL], students, refs) if ORIGINAL in by_name else None
    rows = []
    for system in chosen:
        r = results[system["name"]]
        rows.append(
            [
                system["name"],
                str(system["beam"]),
                f"{size_mb(system):.1f}",
                f"{r['words_per_s_one_core']:,.0f}",
                f"{r['words_per_s']:,.0f}",
                f"{r['latency_ms']:.1f}",
                f"{r['peak_rss_mb']:,.0f}",
            ]
        )
    header = ["system", "beam", "size (MB)", "words/s, 1 core", f"words/s, {threads} cores"]
    header += ["latency (ms)", "peak RSS (MB)"]
    machine = machine_info("threads", threads, ("ctranslate2",))
    measured = {
        s["name"]: {k: v for k, v in results[s["name"]].items() if k != "hyps"}
        | {"beam": s["beam"], "size_mb": size_mb(s)}
        for s in chosen
    }
    body = {"systems": measured, "machine": machine}
    files.write_json(out.with_suffix(".json"), body)
    text = [
        "# Teachers and student: quality, size and speed",
        "",
        "Made by `python -m bench.efficiency` (bench/efficiency.py), each system in a process of its own.",
        "Words: source words (split on spaces). Latency: the median of one sentence at batch 1.",
        "",
        markdown_table(header, rows, "lrrrrrr"),
        "",
        markdown_table(["machine", ""], list(machine.items())),
        "",
        "## Quality against the teacher ensemble",
        "",
        re.sub(r"(?m)^## ", "### ", comparison_markdown(comparison)),
    ]
    if gained is not None:
        text += [
            "## The students against their shape trained on the original data",
            "",
            re.sub(r"(?m)^## ", "### ", comparison_markdown(gained)),
        ]
    out.write_text("\n".join(text) + "\n", encoding="utf-8")
    click.echo(f"wrote {out} and {out.with_suffix('.json')}")


@main.command("one")
@click.option("--system", "spec", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True)
@click.option("--clean", type=click.Path(file_okay=False, exists=True, path_type=Path), required=True)
@click.option("--threads", type=click.IntRange(min=1), required=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
def one(spec: Path, clean: Path, threads: int, out: Path) -> None:
    """(A child of the table's run) measure one system and write what it found to OUT."""
    system = json.loads(spec.read_text(encoding="utf-8"))
    files.write_json(out, measure_one(system, clean, threads))


if __name__ == "__main__":
    main()
