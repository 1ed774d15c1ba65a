"""Stage `teachers`: more teachers for distillation, trained as data/model is but from other seeds.

    python -m pipeline teachers --params params.yaml --bin data/bin --bpe data/bpe --clean data/clean \
        --work data/teachers-work --out data/teachers

An ensemble of models that differ only in their seed is what the field distils from. For each seed
of distill.teacher_seeds the train command runs with data/model's settings (train.seed set to it)
on the same data into --out/seed<N> (lineage.seeded_teacher). Its checkpoints and logs (steps.tsv,
valid.tsv, summary.json) stay in --work/seed<N>, so a killed run resumes and a finished one only
rebuilds its outputs; its MLflow run is one more training run. The distill stage translates with
them beside its other teachers. With distillation off or no seeds it writes only off.json.
docs/distillation.md.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import click
import yaml

from pipeline import files, lineage
from pipeline import params as P
from pipeline.data import artifacts
from pipeline.stages.options import bpe_option, clean_option, directory, load_params, params_option, run_stage

RUNS = ("train",)  # the stage commands it runs, in children: dvc.yaml lists their code among its deps
OFF = artifacts.REVERSE_OFF  # the whole of --out while there is nothing to train
WHO = "teachers: `python -m pipeline {command}`"


def seeded(params: P.Params, seed: int) -> P.Params:
    """A teacher's settings: the run's own but for the seed, and no distillation of its own."""
    return dataclasses.replace(
        params,
        train=dataclasses.replace(params.train, seed=seed),
        distill=dataclasses.replace(params.distill, enabled=False, teacher_seeds=()),
    )


def teachers(params: P.Params, data: tuple[Path, Path, Path], work: Path, out: Path) -> list[int]:
    """Train (or resume, or find finished) a teacher per seed into out/seed<N>; -> the seeds trained.
    `data`: the train stage's --bin, --bpe and --clean."""
    seeds = params.distill.teacher_seeds if params.distill.enabled else ()
    out.mkdir(parents=True, exist_ok=True)
    kept = {lineage.seeded_teacher(out, seed).name for seed in seeds}
    for old in out.iterdir():  # what another run of this stage left: off.json, teachers of other seeds
        if old.name not in kept:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    work.mkdir(parents=True, exist_ok=True)
    if not seeds:
        why = "no distill.teacher_seeds" if params.distill.enabled else "distill.enabled is false"
        files.write_json(out / OFF, {"enabled": False, "why": f"{why}: no teachers to train"})
        return []
    bin_dir, bpe_dir, clean_dir = data
    for seed in seeds:
        own = work / f"seed{seed}"
        own.mkdir(exist_ok=True)
        settings = own / "params.yaml"
        settings.write_text(yaml.safe_dump(seeded(params, seed).to_dict(), sort_keys=False))
        click.echo(f"teachers: training seed {seed} of {', '.join(map(str, seeds))}", err=True)
        run_stage(
            WHO,
            "train",
            *("--params", settings, "--bin", bin_dir, "--bpe", bpe_dir, "--clean", clean_dir),
            *("--checkpoints", own / "checkpoints", "--on-change", "restart"),
            *("--out", lineage.seeded_teacher(out, seed), "--log", own / "log"),
        )
    return list(seeds)


@click.command("teachers")
@params_option
@directory("bin", required=True, help="The binarize stage's output directory.")
@bpe_option
@clean_option
@directory("work", required=True, help="Kept across runs: each teacher's settings, checkpoints and logs.")
@directory("out", required=True, help="Where to write the teachers' model directories, seed<N> each.")
def command(
    params_file: Path,
    bin_dir: Path,
    bpe_dir: Path,
    clean_dir: Path,
    work_dir: Path,
    out_dir: Path,
) -> None:
    """Train the teachers of distill.teacher_seeds: data/model's settings with other seeds."""
    params = load_params(params_file)
    seeds = teachers(params, (bin_dir, bpe_dir, clean_dir), work_dir, out_dir)
    if not seeds:
        click.echo(f"teachers: no distill.teacher_seeds to train (or distillation off) -> {out_dir}/{OFF}")
        return
    click.echo(f"teachers: seeds {', '.join(map(str, seeds))} -> {out_dir}")
