"""The pairs' experiments: a pair's base plus a recipe (plus one sweep value), queued through DVC,
and the table of their runs (the command: pipeline/stages/recipes.py; the method: docs/experiments.md).

Every experiment is params.yaml, its pair's base, its recipe's settings and, for a sweep variant,
one axis value (experiments/: recipes.py), validated before anything is queued. A run capped at
N steps is a ranking run, shown with val scores only; selection is on val only. Full-budget runs
get test BLEU and chrF with 95% intervals and sacreBLEU's paired bootstrap p against the pair's
baseline run, from the runs' hypotheses and the pair's test references (read from the catalog as
the download stage reads them, or given), checked against the refs_sha256 each score stage recorded.

The MLflow store and DVC cache live and die with one checkout, while a sweep spans sessions: the
table saves every finished run it reads to reports/pairs/runs/<experiment>.json (archive.py) and
reads those back next time.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click
import yaml
from sacrebleu.metrics import BLEU, CHRF

from pipeline import files
from pipeline import params as P
from pipeline.errors import ParamsError, UserError
from pipeline.experiments import archive as run_archive
from pipeline.experiments import recipes, scoring
from pipeline.experiments.recipes import dvc_binary, read_raw, settings, variant_params
from pipeline.experiments.runs import (
    default_params,
    differences,
    experiment_baselines,
    experiment_commit,
    experiment_file,
    experiment_names,
    experiment_refs,
    newest,
    number,
    read_run,
    scored,
    where_ran,
)
from pipeline.machine import machine_info
from pipeline.reporting import runs
from pipeline.reporting.hypotheses import RunHypotheses, key_of
from pipeline.reporting.metrics import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    SIGNIFICANCE_LEVEL,
)
from pipeline.reporting.runs import RunRecord
from pipeline.reporting.significance import references_path
from pipeline.reporting.tables import escape_cell, fmt_delta, fmt_p, fmt_score, markdown_table
from pipeline.tracking import store

BUDGET_MINUTES = 90.0  # the cap on one training on the 2-core CPU
BASELINE = "baseline"
CUSTOM = "custom"  # a run queued with --set and --name: no recipe of RECIPES


# The experiments' data (recipes.py): the pairs' bases, the recipes, the sweep's axes.
EXPERIMENTS = Path(__file__).resolve().parents[2] / recipes.EXPERIMENTS
PAIRS = recipes.load_pairs(EXPERIMENTS)  # a file of the wrong shape: a UserError naming it, at import
RECIPES = recipes.load_recipes(PAIRS, EXPERIMENTS)
GRID = recipes.load_grid(EXPERIMENTS)


@dataclass(frozen=True)
class Experiment:
    name: str
    pair: str
    recipe: str  # a key of RECIPES, or CUSTOM
    changes: dict[str, object]  # over params.yaml: all of its -S settings
    steps: int | None = None  # the train.max_steps cap of a ranking run
    axis: str | None = None  # a sweep variant's axis and value
    value: str | None = None
    parent: str | None = None  # the experiment whose model it starts from (fetch_parent)
    ensemble: tuple[str, ...] = ()  # experiments whose models decode with its own (fetched as parents are)

    @property
    def ranking(self) -> bool:
        return self.steps is not None


def full_name(pair: str, recipe: str, steps: int | None = None) -> str:
    return f"{pair}-{recipe}" + (f"-s{steps}" if steps is not None else "")


# A ranking run trains exactly its --steps updates: no epoch cap binds first and no early stop ends it
# (on small data val BLEU sits near 0 for the first epochs, and patience then stops a run at random);
# its model is still its best checkpoint by val.
RANKING_EPOCHS = 10_000


def recipe_experiment(
    pair: str, recipe: str, steps: int | None = None, parent: str | None = None
) -> Experiment:
    """The pair's baseline with `recipe`'s changes; a recipe with a parent starts from `parent` where given
    (another finished experiment of the pair, named in the experiment's name), else from its own."""
    if not RECIPES[recipe].applies(pair):
        raise UserError(f"--recipe {recipe} is for {', '.join(RECIPES[recipe].only)} only, not {pair}")
    name = full_name(pair, recipe, steps)
    default = RECIPES[recipe].parent.get(pair)
    if parent is not None and default is None:
        raise UserError(f"--parent: --recipe {recipe} starts from no parent; --recipe parent does")
    if parent is not None and parent != default:
        if not parent.startswith(f"{pair}-"):
            raise UserError(f"--parent {parent}: not an experiment of {pair} (its name starts with {pair}-)")
        name += "-" + parent.removeprefix(f"{pair}-")
    parent = parent or default
    changes = {**PAIRS[pair].base, **RECIPES[recipe].for_pair(pair)}
    if parent is not None:
        changes["train.init_from"] = str(parent_dir(parent))
    if steps is not None:
        changes |= {"train.max_steps": steps, "train.max_epochs": RANKING_EPOCHS, "train.patience": 0}
    return Experiment(name, pair, recipe, changes, steps, parent=parent)


def sweep_experiments(
    raw: dict[str, Any], pair: str, recipe: str, steps: int, only: tuple[str, ...] = ()
) -> list[Experiment]:
    """The recipe's ranking run, then one variant per grid value that changes its params (of what `only`
    names, AXIS or AXIS=VALUE, or all of GRID); each validated."""
    center = recipe_experiment(pair, recipe, steps)
    at_center = variant_params(raw, center.changes)
    out = [center]
    for axis, values in grid_values(only).items():
        for value in values:
            change = GRID[axis][value]
            name = f"{center.name}-{axis}-{value}"  # the recipe's parent too (replace)
            exp = replace(center, name=name, changes={**center.changes, **change}, axis=axis, value=value)
            if check(raw, exp) != at_center:
                out.append(exp)
    return out


def grid_values(only: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Axis -> its values to run, in GRID's order: all of GRID, or what `only` names (AXIS, AXIS=VALUE)."""
    if not only:
        return {axis: list(values) for axis, values in GRID.items()}
    out: dict[str, list[str]] = {}
    for item in only:
        axis, _, value = item.partition("=")
        if axis not in GRID or (value and value not in GRID[axis]):
            what, known = ("axis", GRID) if axis not in GRID else ("value", GRID[axis])
            raise UserError(f"--only {item}: {what} not in the grid ({', '.join(known)})")
        picked = out.setdefault(axis, [])
        picked += [v for v in ([value] if value else GRID[axis]) if v not in picked]
    return {axis: [v for v in GRID[axis] if v in picked] for axis, picked in out.items()}


def check(raw: dict[str, Any], exp: Experiment) -> P.Params:
    """The experiment's params, validated, with its data names resolved against the catalog; test and val
    sets never in training."""
    from pipeline.data import planning  # here: the download stage's own name resolution

    try:
        params = variant_params(raw, exp.changes)
        planning.plan_sources(params.data)
    except ParamsError as e:
        raise UserError(f"{exp.name}: {e}") from None
    for split in ("val", "test"):
        shared = set(getattr(params.data, split)) & set(params.data.train)
        if shared:
            raise UserError(f"{exp.name}: {', '.join(sorted(shared))} in both data.train and data.{split}")
    return params


def dvc_command(exp: Experiment) -> list[str]:
    args = ["dvc", "exp", "run", "--queue", "-n", exp.name]
    for setting in settings(exp.changes):
        args += ["-S", setting]
    return args


PARENTS = Path("data/parents")  # the parents' models, fetched out of the DVC cache (git ignores data/)


def parent_dir(experiment: str) -> Path:
    """Where fetch_parent puts an experiment's model: an absolute path, since a queued run works in a copy
    of the repository (under .dvc/tmp/exps) that holds only what git tracks."""
    return (PARENTS / experiment).resolve()


def experiment_rev(experiment: str) -> str | None:
    """The commit of the newest finished DVC experiment of that name in this repository, or None."""
    return next((ref.commit for ref in experiment_refs() if ref.name == experiment), None)


FETCHED = "fetched.json"  # in a fetched parent: the experiment and commit it came from


def fetch_parent(experiment: str, hint: str) -> Path:
    """The newest run of `experiment`'s data/model, in parent_dir(experiment) (fetched again only when a
    newer run of it has finished); `hint` says how to make one where there is none."""
    out = parent_dir(experiment)
    rev = experiment_rev(experiment)
    if rev is None:
        raise UserError(f"no finished DVC experiment {experiment} in this repository to start from: {hint}")
    if (out / FETCHED).is_file() and json.loads((out / FETCHED).read_text()).get("commit") == rev:
        return out
    part = out.with_name(out.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    get = [dvc_binary(), "get", ".", "data/model", "--rev", rev, "-o", str(part)]
    got = subprocess.run(get, capture_output=True, text=True)
    if got.returncode != 0:
        shutil.rmtree(part, ignore_errors=True)
        why = (got.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"{experiment}: its model (data/model at {rev[:7]}) is not in the DVC cache ({why}); {hint}"
        )
    files.write_json(part / FETCHED, {"experiment": experiment, "commit": rev})
    shutil.rmtree(out, ignore_errors=True)
    part.rename(out)
    return out


def fetch_parents(experiments: list[Experiment], checked: list[P.Params]) -> None:
    """Fetch each parent recipe's parent and check that the child's architecture (`checked`: each
    experiment's params) is the parent's."""
    from pipeline import lineage

    for exp, params in zip(experiments, checked, strict=True):
        for member in exp.ensemble:  # decode.ensemble checks them when the decode stage loads them
            fetch_parent(member, f"run it first (--ensemble names a finished experiment of {exp.pair})")
        parent = exp.parent
        if parent is None:
            continue
        recipe = next((r for r in RECIPES if full_name(exp.pair, r) == parent), None)
        how = f"--recipe {recipe}" if recipe else f"... --name {parent}"
        where = str(
            fetch_parent(parent, f"run `python -m pipeline recipes queue --pair {exp.pair} {how}` first")
        )
        try:
            lineage.check_architecture(params, lineage.read(where)[1], where)
        except ParamsError as e:
            raise UserError(f"{exp.name}: {e}") from None


_EXP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def custom_experiment(
    exp: Experiment, name: str | None, given: dict[str, object], members: tuple[str, ...]
) -> Experiment:
    """`exp` with further settings and ensemble members under a name of its own; `exp` itself where
    there are none. A name without a change, or a change without a name, is refused."""
    if not (given or members or name):
        return exp
    if not ((given or members) and name):
        raise UserError(
            "--set and --ensemble need --name, and --name one of them: a changed recipe needs a name "
            "of its own"
        )
    pair = exp.pair
    if not name.startswith(f"{pair}-") or _EXP_NAME.fullmatch(name) is None:
        raise UserError(f"--name {name!r}: letters, digits, '.', '-' only, starting with {pair}-")
    for member in members:
        if not member.startswith(f"{pair}-"):
            raise UserError(f"--ensemble {member}: not an experiment of {pair} (named {pair}-...)")
    if members:
        given = {**given, "decode.ensemble": [str(parent_dir(member)) for member in members]}
    parent = None if "train.init_from" in given else exp.parent  # a parent of its own: not fetched
    changes = {**exp.changes, **given}
    return Experiment(name, pair, CUSTOM, changes, exp.steps, parent=parent, ensemble=members)


def enqueue(
    experiments: list[Experiment], raw: dict[str, Any], dry_run: bool, skip_taken: bool = False
) -> None:
    """Validate every experiment, fetch the parents they start from, then queue each (or print its
    command, quoted for a shell; a dry run fetches nothing). A name that a queued, running or
    finished experiment already has, here or in ARCHIVE, is refused or, with `skip_taken`, left out
    (a dry run too: it shows what the sweep would queue): a sweep run again with another --only, or
    in another checkout, adds its new runs alone."""
    checked = [check(raw, exp) for exp in experiments]
    names = [e.name for e in experiments]
    if len(set(names)) != len(names):
        raise UserError(f"two experiments of one name among {names}")
    if skip_taken or not dry_run:
        here = experiment_names()
        taken = here | archived_names()
        clash = [e.name for e in experiments if e.name in taken]
        if clash and not skip_taken:
            name = clash[0]
            fix = (
                f"remove it first (`dvc queue remove {name}` or `dvc exp remove {name}`)"
                if name in here
                else f"it finished in an earlier checkout ({ARCHIVE / name}.json holds it): keep it"
            )
            raise UserError(
                f"experiment {name} is already queued, running or finished: {fix}, or queue "
                "this one under another --name"
            )
        for name in clash:
            where = "" if name in here else f" (archived in {ARCHIVE})"
            click.echo(f"skipped {name}: already queued, running or finished{where}")
        kept = [(e, c) for e, c in zip(experiments, checked, strict=True) if e.name not in taken]
        experiments, checked = [e for e, _ in kept], [c for _, c in kept]
    if not dry_run:
        fetch_parents(experiments, checked)
    for exp in experiments:
        args = dvc_command(exp)
        if dry_run:
            click.echo(shlex.join(args))
            continue
        subprocess.run([dvc_binary(), *args[1:]], check=True)
        click.echo(f"queued {exp.name}")


# What `table` writes, and where it keeps every finished run (its --out and --archive defaults):
# the runs of earlier checkouts, whose names are as taken as those of this one's experiments.
TABLE = Path("reports/pairs.md")
ARCHIVE = TABLE.with_suffix("") / "runs"


def archived_names() -> set[str]:
    return {p.stem for p in ARCHIVE.glob("*.json")}


def archive_new_runs(report: Report, archive: Path) -> None:
    """Save each finished run read from MLflow (not already archived) for the next table to read."""
    for row in (r for pair in report.pairs for r in [*pair.rows, *pair.sweep]):
        if row.status == "finished" and (not row.archived or row.amended):
            run_archive.keep(
                archive, row.name, run_archive.ArchivedRun(row.record, row.tags, row.summary, row.hyps)
            )


# --- the runs ----------------------------------------------------------------------


@dataclass
class Row:
    exp: Experiment
    record: RunRecord
    status: str  # finished, or why it has no scores
    params: dict[str, str]  # those that differ from params.yaml
    tags: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    hyps: RunHypotheses | None = None
    ci95: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # test set -> bleu/chrf -> [lo, hi]
    delta: dict[str, dict[str, float]] = field(default_factory=dict)  # test set -> bleu/chrf -> Δ
    p: dict[str, dict[str, float | None]] = field(default_factory=dict)
    best_val: bool = False
    archived: bool = False  # read from the archive, not from MLflow
    amended: bool = False  # its summary gained what the archive lacked: archived again
    upstream: dict[str, float] = field(default_factory=dict)  # minutes of the models it needed first

    @property
    def name(self) -> str:
        return self.exp.name

    def metric(self, key: str) -> float | None:
        return number(self.record.metrics.get(key, math.nan))

    @property
    def val(self) -> dict[str, float | None]:
        return {"bleu": self.metric("dev_bleu"), "chrf": self.metric("dev_chrf")}

    @property
    def train_minutes(self) -> float | None:
        seconds = self.metric("train_seconds")
        return None if seconds is None else round(seconds / 60, 1)

    @property
    def total_minutes(self) -> float | None:
        """Its training and that of every model it needed (reverse model, parents)."""
        mine = self.train_minutes
        return None if mine is None else round(mine + sum(self.upstream.values()), 1)


@dataclass
class PairResult:
    pair: str
    tests: list[str]
    rows: list[Row]  # full-budget runs, the baseline first
    sweep: list[Row]  # ranking runs
    baseline: Row | None
    refs: str | None  # where the test references came from
    copy_source: dict[str, dict[str, float]] = field(default_factory=dict)  # test set -> BLEU, chrF


@dataclass
class Report:
    pairs: list[PairResult]
    notes: list[str]
    machine: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": [run_json(r, p) for p in self.pairs for r in p.rows],
            "sweep": [sweep_json(r) for p in self.pairs for r in p.sweep],
            "pairs": {
                p.pair: {
                    "baseline": p.baseline.name if p.baseline else None,
                    "status": "baseline finished" if p.baseline else missing_baseline(p.pair),
                    "best_val": next((r.name for r in p.rows if r.best_val), None),
                    "best_val_sweep": next((r.name for r in p.sweep if r.best_val), None),
                    "tests": p.tests,
                    "refs": p.refs,
                    "copy_source": p.copy_source,
                }
                for p in self.pairs
            },
            "selection": "best val BLEU (chrF breaks ties); test sets are never used to rank",
            "bootstrap": {"n": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "test": "paired bootstrap"},
            "budget_minutes": BUDGET_MINUTES,
            "notes": self.notes,
            "machine": self.machine,
        }


def missing_baseline(pair: str) -> str:
    return (
        f"no scored baseline run ({full_name(pair, BASELINE)}): p-values are missing; queue it with "
        f"`python -m pipeline recipes queue --pair {pair} --recipe {BASELINE}`"
    )


def known_experiments(steps: set[int]) -> dict[str, Experiment]:
    """Every experiment `queue` and `sweep` can name, for the ranking caps `steps` (all recipes, all axes)."""
    out: dict[str, Experiment] = {}
    for pair in PAIRS:
        for recipe in (r for r in RECIPES if RECIPES[r].applies(pair)):
            for cap in (None, *sorted(steps)):
                center = recipe_experiment(pair, recipe, cap)
                out[center.name] = center
                if cap is None:
                    continue
                for axis, values in GRID.items():
                    for value, change in values.items():
                        name = f"{center.name}-{axis}-{value}"
                        changes = {**center.changes, **change}
                        out[name] = replace(center, name=name, changes=changes, axis=axis, value=value)
    return out


def experiment_of(record: RunRecord, known: dict[str, Experiment]) -> Experiment | None:
    """The experiment a run belongs to: a known name, or a custom one named <pair>-... (--name)."""
    name = record.dvc_exp
    if name is None:
        return None
    if name in known:
        return known[name]
    pair = next((p for p in PAIRS if name.startswith(f"{p}-")), None)
    if pair is None:
        return None
    steps = int(record.params.get("train.max_steps", "0") or 0) or None
    return other_parent(name, pair, record, steps) or Experiment(name, pair, CUSTOM, {}, steps)


def parent_of(record: RunRecord) -> str | None:
    """The experiment a run started from: the name of its train.init_from (a fetched parent_dir)."""
    init = record.params.get("train.init_from", "null")
    return None if init == "null" else Path(init).name


def members_of(record: RunRecord) -> list[str]:
    """The experiments whose models a run decoded with its own: the names of its decode.ensemble (fetched
    parent_dirs)."""
    found = yaml.safe_load(record.params.get("decode.ensemble", "[]") or "[]")
    return [Path(str(path)).name for path in found] if isinstance(found, list) else []


def other_parent(name: str, pair: str, record: RunRecord, steps: int | None) -> Experiment | None:
    """A recipe's run from another parent (`queue --parent`): the experiment that recipe_experiment makes
    of the run's own parent, where it has the run's name; a --name run that merely starts alike is not."""
    parent = parent_of(record)
    if parent is None or not parent.startswith(f"{pair}-"):
        return None
    made = (recipe_experiment(pair, r, steps, parent) for r in RECIPES if RECIPES[r].parent.get(pair))
    return next((exp for exp in made if exp.name == name), None)


def collect(params_file: Path, given_refs: dict[str, Path], archive: Path) -> Report:
    """Every pair's rows: its experiments' runs in MLflow and in `archive`, scored on its test sets."""
    params = P.load(params_file)
    uri = store.tracking_uri()
    records, from_archive, notes = run_archive.with_mlflow(params.tracking.experiment, uri, archive)
    rows = experiment_rows(records, default_params(params), set(from_archive), notes)
    out = []
    scratch = Path(tempfile.mkdtemp(prefix="pairs-refs-"))  # removed once the statistics are made
    for pair in PAIRS:
        refs = (params_file, given_refs.get(pair), scratch / pair)
        out.append(pair_result(pair, [r for r in rows if r.exp.pair == pair], from_archive, uri, refs, notes))
    shutil.rmtree(scratch, ignore_errors=True)
    import torch  # here, not at the top: `queue` needs no torch

    return Report(out, notes, machine_info("torch threads", torch.get_num_threads()))


def experiment_rows(
    records: list[RunRecord], defaults: dict[str, str], archived: set[str], notes: list[str]
) -> list[Row]:
    """A row per experiment the records are runs of (its chosen run), with its commit; notes appended."""
    caps = {int(s) for r in records if (s := r.params.get("train.max_steps", "0")).isdigit() and int(s) > 0}
    known = known_experiments(caps)
    by_name: dict[str, list[RunRecord]] = {}
    for record in records:
        exp = experiment_of(record, known)
        if exp is not None:
            by_name.setdefault(exp.name, []).append(record)
    baselines = experiment_baselines()
    rows: list[Row] = []
    for name, mine in by_name.items():
        exp = experiment_of(mine[0], known)
        assert exp is not None
        row = pick_row(exp, mine, defaults)
        row.archived = str(row.record.id) in archived
        row.record, note = experiment_commit(name, row.record, baselines)
        notes += [note] if note else []
        rows.append(row)
    return rows


def pair_result(
    pair: str,
    rows: list[Row],
    from_archive: dict[str, run_archive.ArchivedRun],
    uri: str,
    refs: tuple[Path, Path | None, Path],
    notes: list[str],
) -> PairResult:
    """One pair's full and ranking runs, read, linked to what they needed, scored and ranked by val.
    `refs`: the params file, the references given for the pair (or None) and a scratch directory."""
    tests = PAIRS[pair].tests
    full = sorted((r for r in rows if not r.exp.ranking), key=lambda r: (r.exp.recipe != BASELINE, r.name))
    ranking = [r for r in rows if r.exp.ranking]
    ranking.sort(key=lambda r: (r.exp.recipe, r.exp.steps or 0, r.exp.axis is not None, r.name))
    for row in full:
        if row.status != "finished":
            continue
        if (old := from_archive.get(str(row.record.id))) is not None:
            row.tags, row.summary, row.hyps = old.tags, old.summary, old.hyps
        else:
            found = read_run(str(row.record.id), uri, row.name, tests)
            row.tags, row.summary, row.hyps = found.tags, found.summary, found.hyps
            notes += [f"{row.name}: {found.problem}"] if found.problem else []
        row.amended = add_reverse(row)
    link_upstream(full + ranking, full)
    base = next((r for r in full if r.exp.recipe == BASELINE and r.status == "finished"), None)
    params_file, given, scratch = refs
    refs_dir, where, refs_notes = references(pair, params_file, given, bool(full), scratch)
    notes += refs_notes
    copied: dict[str, dict[str, float]] = {}
    if refs_dir is not None:
        notes += score_sets(full, base, refs_dir, tests)
        copied, copy_notes = copy_source_scores(refs_dir, tests)
        notes += copy_notes
    mark_best(full)
    mark_best(ranking)
    notes += over_budget(full + ranking)
    return PairResult(pair, tests, full, ranking, base, where, copied)


REVERSE_SUMMARY = "reports/reverse/summary.json"  # the reverse stage's, committed with its experiment
REVERSE = "reverse model"  # its key in Row.upstream


def add_reverse(row: Row) -> bool:
    """Give a back-translation run's summary its reverse model's (train seconds, val BLEU), from the
    experiment's commit, where it lacks it; whether it was added."""
    if row.record.params.get("backtranslation.enabled") != "true" or "reverse" in row.summary:
        return False
    text = experiment_file(row.name, REVERSE_SUMMARY)
    if text is None:
        return False
    found = json.loads(text)
    row.summary["reverse"] = {k: found.get(k) for k in ("train_seconds", "best_val_bleu", "steps", "epochs")}
    return True


def link_upstream(rows: list[Row], parents: list[Row]) -> None:
    """Each row's upstream minutes: its reverse model's, its parent's total (the parent's row among
    `parents`, named by the run's train.init_from, a fetched parent_dir), and each ensemble member's."""
    by_name = {r.name: r for r in parents}

    def total(row: Row, seen: frozenset[str]) -> None:
        if row.name in seen:  # a cycle cannot come from fetch_parent; stop rather than recurse
            return
        seconds = row.summary.get("reverse", {}).get("train_seconds")
        if seconds is not None:
            row.upstream[REVERSE] = round(seconds / 60, 1)
        parent = by_name.get(parent_of(row.record) or "")
        if parent is not None and parent is not row:
            total(parent, seen | {row.name})
            if parent.total_minutes is not None:
                row.upstream[f"parent {parent.name}"] = parent.total_minutes
        for name in members_of(row.record):  # a member that is the parent is counted once, above
            member = by_name.get(name)
            if member is not None and member is not row and member is not parent:
                total(member, seen | {row.name})
                if member.total_minutes is not None:
                    row.upstream[f"ensemble member {name}"] = member.total_minutes

    for row in rows:
        total(row, frozenset())


def over_budget(rows: list[Row]) -> list[str]:
    """A note for each training over the budget: a run's own and its reverse model's (a parent's is
    noted on the parent's row)."""
    return [
        f"{r.name}: {what} trained {minutes} minutes, over the {BUDGET_MINUTES:.0f}-minute budget"
        for r in rows
        for what, minutes in [("its model", r.train_minutes), (f"its {REVERSE}", r.upstream.get(REVERSE))]
        if (minutes or 0) > BUDGET_MINUTES
    ]


def pick_row(exp: Experiment, records: list[RunRecord], defaults: dict[str, str]) -> Row:
    """The experiment's newest finished run with scores (val for a ranking run, test for a full one)."""
    done = [r for r in records if (val_scored(r) if exp.ranking else scored(r))]
    chosen = newest(done or records)
    if done:
        status = "finished"
    else:
        state = "finished, not scored" if chosen.status == "finished" else chosen.status
        status = f"no scored run yet (latest {str(chosen.id)[:8]}: {state})"
    return Row(exp, chosen, status, {k: a for k, (a, _) in differences(chosen.params, defaults).items()})


def typed(text: str) -> object:
    """A param as MLflow holds it (param_text's spelling) as its YAML value: 0.3, [a, b], null, auto."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def val_scored(record: RunRecord) -> bool:
    return record.status == "finished" and "dev_bleu" in record.metrics


def mark_best(rows: list[Row]) -> None:
    """The best run by val BLEU (then val chrF): selection on val only."""
    ranked = [r for r in rows if r.status == "finished" and r.val["bleu"] is not None]
    if ranked:
        max(ranked, key=lambda r: (r.val["bleu"], r.val["chrf"] or -1.0)).best_val = True


def references(
    pair: str, params_file: Path, given: Path | None, needed: bool, tmp: Path
) -> tuple[Path | None, str | None, list[str]]:
    """The pair's test references: DIR if given, else its catalog sets read as the download stage reads
    them (into `tmp`); None with a note where they cannot be had."""
    if given is not None:
        return given, str(given), []
    if not needed:
        return None, None, []
    from pipeline.data import planning, reading

    data = variant_params(read_raw(params_file), PAIRS[pair].base).data
    try:
        mirror = reading.resolve_mirror(data)
        reader = reading.Reader(tmp / "fetch", mirror)  # references: the target side, never tagged
        (tmp / "fetch").mkdir(parents=True)
        (tmp / "test").mkdir()
        for source in planning.plan_sources(data)["test"]:
            reader.copy_split([source], tmp / "test" / source.name)
    except UserError as e:
        return None, None, [f"{pair}: the test references could not be read ({e}); give --refs {pair}=DIR"]
    shown = os.path.relpath(mirror) if isinstance(mirror, Path) else mirror  # ../shared/corpora, or a URL
    via = f"mirror {shown}" if mirror else "the network"
    return tmp, f"the catalog via {via} (the download stage's reader)", []


def score_sets(rows: list[Row], base: Row | None, refs_dir: Path, tests: list[str]) -> list[str]:
    """Each full run's 95% intervals per test set, and its paired test against the pair's baseline."""
    hyps = {row.name: row.hyps for row in rows if row.hyps is not None}
    scored = scoring.score_sets(hyps, base.name if base else None, refs_dir, tests)
    for row in rows:
        row.ci95.update(scored.ci95.get(row.name, {}))
        row.delta.update(scored.delta.get(row.name, {}))
        row.p.update(scored.p.get(row.name, {}))
    return scored.notes


def copy_source_scores(refs_dir: Path, tests: list[str]) -> tuple[dict[str, dict[str, float]], list[str]]:
    """BLEU and chrF of each test set's source copied unchanged as its translation, where refs_dir has
    the source beside the reference: the floor for a pair whose languages share a script, where names,
    numbers and loanwords carry over (en->ms: a model that scores below it has learned less than none).
    Also the notes on each set left without the floor: no source beside the reference, or a source
    whose line count is not the reference's."""
    out, notes = {}, []
    for name in tests:
        ref = references_path(refs_dir, key_of(name))
        src = ref.with_suffix(".src")
        if not src.is_file():
            notes.append(f"{name}: no source beside the reference ({src}): no copied-source floor")
            continue
        hyps, refs = files.read_lines(src), files.read_lines(ref)
        if len(hyps) != len(refs):
            notes.append(
                f"{name}: no copied-source floor: {src} has {len(hyps)} lines, {ref} {len(refs)}; "
                "give both sides of the same test set"
            )
            continue
        # BLEU and chrF only: TER is slow on long lines that share little
        out[name] = {
            m: round(M().corpus_score(hyps, [refs]).score, 2) for m, M in (("bleu", BLEU), ("chrf", CHRF))
        }
    return out, notes


# --- the outputs -----------------------------------------------------------------------


def _common(row: Row) -> dict[str, Any]:
    return {
        "name": row.name,
        "pair": row.exp.pair,
        "recipe": row.exp.recipe,
        "commit": row.record.commit,
        "params": {k: typed(v) for k, v in row.params.items()},
        "train_minutes": row.train_minutes,
        "upstream_minutes": row.upstream,
        "total_minutes": row.total_minutes,
        "val": row.val,
        "status": row.status,
        "run_id": row.record.id,
        "steps": row.exp.steps,
        "best_val": row.best_val,
    }


def run_json(row: Row, pair: PairResult) -> dict[str, Any]:
    out = _common(row)
    out["test"] = {
        name: {
            "bleu": row.metric(runs.test_column(name, "bleu")),
            "chrf": row.metric(runs.test_column(name, "chrf")),
            "ci95": row.ci95.get(name),
            "p_vs_baseline": row.p.get(name),
            "delta_vs_baseline": row.delta.get(name),
        }
        for name in pair.tests
        if row.status == "finished"
    }
    out |= {k: row.summary.get(k) for k in ("epochs", "stopped", "best_step")} | {
        "ran_on": where_ran(row.tags)
    }
    return out


def sweep_json(row: Row) -> dict[str, Any]:
    """A ranking run: val scores only (its test scores exist in MLflow but are not for selection)."""
    return _common(row) | {"axis": row.exp.axis, "value": row.exp.value}


def render(report: Report) -> str:
    lines = [
        "# Low-resource pairs: recipes and sweep",
        "",
        "Written by `python -m pipeline recipes table` from the runs in MLflow and those archived in git "
        "(`reports/pairs/runs/`, one JSON per finished run with its hypotheses); every number comes from a "
        "run. Each experiment is params.yaml plus its pair's baseline settings plus its recipe (and, in "
        "the sweep, one change). **Selection is on val only**: ★ marks each pair's best run by val BLEU "
        "(chrF breaks ties); test sets never rank. Test BLEU: the score stage's, with its 95% bootstrap "
        "interval, Δ to the pair's baseline and p: sacreBLEU's paired bootstrap "
        f"({BOOTSTRAP_RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED}); * marks p < {SIGNIFICANCE_LEVEL}. "
        f"Budget: {BUDGET_MINUTES:.0f} minutes for each training. Train min: the run's own training, "
        "then (+ ...) that of each model it needed first: a back-translation run's reverse model, a "
        "fine-tuned run's parent (with the parent's own).",
    ]
    for pair in report.pairs:
        lines += ["", f"## {pair.pair}", "", f"Baseline: {PAIRS[pair.pair].why}."]
        if pair.baseline is None:
            lines += ["", f"**{missing_baseline(pair.pair)}.**"]
        if pair.refs:
            lines += ["", f"Test references: {pair.refs}."]
        if pair.copy_source:
            copied = "; ".join(
                f"{name} BLEU {fmt_score(s['bleu'])}, chrF {fmt_score(s['chrf'])}"
                for name, s in pair.copy_source.items()
            )
            lines += [
                "",
                f"The source copied unchanged as the translation (what a model should beat): {copied}.",
            ]
        lines += ["", full_table(pair) if pair.rows else "No full-budget run yet."]
        lines += ["", "### Sweep (val only)", "", sweep_table(pair) if pair.sweep else "No ranking run yet."]
    lines += ["", "## Notes", "", *(f"- {escape_cell(n)}" for n in report.notes or ["none"])]
    here = ", ".join(f"{k} {v}" for k, v in report.machine.items())
    lines += ["", f"This table made on: {here}."]
    return "\n".join(lines) + "\n"


def full_table(pair: PairResult) -> str:
    header = ["run", "recipe", "commit", "train min", "val BLEU", "val chrF"]
    header += [f"{name} {label} (95% CI), Δ, p" for name in pair.tests for label in ("BLEU", "chrF")]
    rows = []
    for row in pair.rows:
        cells = [escape_cell(row.name) + (" ★" if row.best_val else ""), row.exp.recipe]
        if row.status != "finished":
            rows.append([*cells, escape_cell(row.status), *["–"] * (len(header) - 3)])
            continue
        cells += [(row.record.commit or "?")[:7], _minutes(row), *_val_cells(row)]
        cells += [
            test_cell(row, name, row is pair.baseline, score)
            for name in pair.tests
            for score in ("bleu", "chrf")
        ]
        rows.append(cells)
    return markdown_table(header, rows, "lll" + "r" * (len(header) - 3), escape=False)


def test_cell(row: Row, name: str, is_base: bool, score: str = "bleu") -> str:
    value = row.metric(runs.test_column(name, score))
    ci = row.ci95.get(name, {}).get(score)
    text = fmt_score(math.nan if value is None else value) + (f" ({ci[0]:.1f}–{ci[1]:.1f})" if ci else "")
    delta, p = row.delta.get(name, {}).get(score), row.p.get(name, {}).get(score)
    if is_base or delta is None:
        return text
    return f"{text}, {fmt_delta(delta)}, {fmt_p(math.nan if p is None else p)}"


def sweep_table(pair: PairResult) -> str:
    header = ["run", "from", "steps", "change", "train min", "val BLEU", "val chrF", "Δ val BLEU"]
    centers = {(r.exp.recipe, r.exp.steps): r for r in pair.sweep if r.exp.axis is None}
    rows = []
    for row in pair.sweep:
        change = "–" if row.exp.axis is None else f"{row.exp.axis} {row.exp.value}"
        cells = [escape_cell(row.name) + (" ★" if row.best_val else ""), row.exp.recipe, str(row.exp.steps)]
        cells.append(escape_cell(change))
        if row.status != "finished":
            rows.append([*cells, escape_cell(row.status), "–", "–", "–"])
            continue
        center = centers.get((row.exp.recipe, row.exp.steps))
        delta = "–"
        if center is not None and center is not row and center.val["bleu"] is not None:
            delta = fmt_delta((row.val["bleu"] or math.nan) - center.val["bleu"])
        rows.append([*cells, _minutes(row), *_val_cells(row), delta])
    return markdown_table(header, rows, "llrlrrrr", escape=False)


def _val_cells(row: Row) -> list[str]:
    return [fmt_score(math.nan if v is None else v) for v in (row.val["bleu"], row.val["chrf"])]


def _minutes(row: Row) -> str:
    """Its training's minutes, with those of the models it needed: `27.9 (+76.6 parent ru-en-baseline)`."""
    return _num(row.train_minutes) + "".join(f" (+{m:.1f} {what})" for what, m in row.upstream.items())


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"
