"""The data stages at scale: download, clean, bpe and binarize on 1M, 4M and 10M pairs.

    python -m bench.data_scale                                  # the full run: an idle machine, ~20 min
    python -m bench.data_scale --sizes 20000 --workers 1,2      # a quick look
    python -m bench.data_scale --sizes 10000000                 # one size; the report keeps the others

Multi30k's training pairs from the mirror, drawn with replacement and perturbed so that dedupe keeps
most, as two local .gz files; each stage runs as `python -m pipeline <stage>` with dvc.yaml's
arguments (clean and binarize with each of --workers, clean once more with the web rules on): wall
seconds, lines/s, clean's ns a character and worker, and the peak RSS of the stage and its workers,
beside the floors (plain read+write; sentencepiece encoding with every thread). Each timed run starts
after os.sync(). Rows go to --out; the section between DATA_START and DATA_END of --md, with a plot,
is rewritten. bench/README.md says more.
"""

from __future__ import annotations

import gzip
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import psutil  # installed with dvc
import sentencepiece as spm
import yaml

from bench.common import markers, merge_rows, write_section
from pipeline.data.filters import RULES
from pipeline.data.pool import cores
from pipeline.files import write_json
from pipeline.machine import machine_info
from pipeline.reporting.tables import fmt, fmt_whole, markdown_table

REPO = Path(__file__).resolve().parents[1]
DATA_START, DATA_END = markers("data-scale")
M30K = "raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
STAGES = ("download", "clean", "bpe", "binarize")
METRICS = ("seconds", "lines_per_s", "peak_rss_mb")  # every stage's
COLUMNS = (*METRICS, "ns_per_char")  # ns_per_char: clean's and the read+write floor's only
BLOCK = 1 << 20


# --- the corpus ------------------------------------------------------------------------------


def base_pairs(mirror: Path) -> tuple[list[str], list[str]]:
    sides = []
    for lang in ("de", "en"):
        path = mirror / M30K / f"train.{lang}.gz"
        sides.append(gzip.decompress(path.read_bytes()).decode("utf-8").splitlines())
    return sides[0], sides[1]


def perturb(line: str, vocab: list[str], rng: random.Random, i: int) -> str:
    words = line.split()
    if words:
        words[rng.randrange(len(words))] = rng.choice(vocab)
    return " ".join(words) + f" {i % 1000}"


def write_corpus(mirror: Path, pairs: int, out: Path, seed: int = 1) -> tuple[Path, Path]:
    """`pairs` perturbed Multi30k pairs as out/train.de.gz and out/train.en.gz."""
    de, en = base_pairs(mirror)
    vocabs = [sorted({w for line in side for w in line.split()}) for side in (de, en)]
    rng = random.Random(seed)
    paths = (out / "train.de.gz", out / "train.en.gz")
    with gzip.open(paths[0], "wt", encoding="utf-8", compresslevel=1) as fs:
        with gzip.open(paths[1], "wt", encoding="utf-8", compresslevel=1) as ft:
            for start in range(0, pairs, 100_000):
                src, tgt = [], []
                for i in range(start, min(start + 100_000, pairs)):
                    j = rng.randrange(len(de))
                    src.append(perturb(de[j], vocabs[0], rng, i))
                    tgt.append(perturb(en[j], vocabs[1], rng, i))
                fs.write("\n".join(src) + "\n")
                ft.write("\n".join(tgt) + "\n")
    return paths


def write_params(
    path: Path, corpus: tuple[Path, Path], workers: int, vocab_size: int, heldout: int, web: bool = False
) -> Path:
    """A params.yaml for the corpus; `web`: clean.filters with every rule for web data (not score,
    which needs models)."""
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    if web:
        params["clean"]["filters"] = list(RULES)
    params["data"].update(
        train=["bench"],
        val=[],
        test=[],
        mirror=None,
        sources={"bench": {"src": str(corpus[0]), "tgt": str(corpus[1])}},
        workers=workers,
    )
    params["data"]["heldout_val"] = params["data"]["heldout_test"] = heldout
    params["bpe"]["vocab_size"] = vocab_size
    path.write_text(yaml.safe_dump(params), encoding="utf-8")
    return path


# --- measuring a stage -----------------------------------------------------------------------


def run_stage(args: list[str], cwd: Path) -> tuple[float, float]:
    """Run `python -m pipeline ARGS`: (wall seconds, peak RSS in MB of it and its children)."""
    os.sync()  # the previous stage's dirty pages are written back now, not during this one
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=cwd, stdout=subprocess.DEVNULL)
    watched = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [watched, *watched.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:  # a process ended between listing and reading: the next sample counts
            pass
        time.sleep(0.02)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise click.ClickException(f"python -m pipeline {' '.join(args)} failed (exit {proc.returncode})")
    return seconds, peak / 2**20


def takes_workers(stage: str) -> bool:
    """Whether the stage has a --workers option."""
    out = subprocess.run([sys.executable, "-m", "pipeline", stage, "--help"], capture_output=True, text=True)
    return "--workers" in out.stdout


def count_chars(raw: Path) -> int:
    """Characters (code points) of raw/train.{src,tgt}."""
    total = 0
    for side in ("src", "tgt"):
        with open(raw / f"train.{side}", encoding="utf-8", newline="\n") as f:
            total += sum(len(block) for block in iter(lambda: f.read(BLOCK), ""))
    return total


def readwrite_floor(raw: Path, scratch: Path) -> float:
    """Seconds to read raw/train.{src,tgt} and write them again, 1 MiB at a time."""
    os.sync()
    start = time.perf_counter()
    for side in ("src", "tgt"):
        with open(raw / f"train.{side}", "rb") as f, open(scratch / f"copy.{side}", "wb") as g:
            for block in iter(lambda: f.read(BLOCK), b""):
                g.write(block)
    seconds = time.perf_counter() - start
    for side in ("src", "tgt"):
        (scratch / f"copy.{side}").unlink()
    return seconds


def encode_floor(clean: Path, model: Path) -> float:
    """Seconds for sentencepiece to encode clean/train.{src,tgt} with every thread."""
    sp = spm.SentencePieceProcessor(model_file=str(model))
    os.sync()
    start = time.perf_counter()
    for side in ("src", "tgt"):
        with open(clean / f"train.{side}", encoding="utf-8", newline="\n") as f:
            while lines := [line.rstrip("\n") for _, line in zip(range(100_000), f)]:
                sp.encode(lines, num_threads=cores())
    return time.perf_counter() - start


def row(system: str, task: str, metric: str, pairs: int, workers: int, value: float, smoke: bool) -> dict:
    out = {"system": system, "task": task, "metric": metric, "pairs": pairs, "workers": workers}
    return {**out, "value": float(f"{value:.4g}"), **({"smoke": True} if smoke else {})}


def stage_args(name: str, params: Path | None, **paths: Path) -> list[str]:
    """`python -m pipeline <name>`'s arguments: --params (if any), then each --<key> <path>."""
    head = [name, "--params", str(params)] if params is not None else [name]
    return head + [x for key, path in paths.items() for x in (f"--{key}", str(path))]


def measure(
    mirror: Path, pairs: int, workers: list[int], vocab_size: int, root: Path, smoke: bool, web: bool = True
) -> list[dict]:
    """Every stage and floor on a corpus of `pairs` pairs; `web`: clean with the web rules too
    (data-clean-web), with the most workers."""
    rows: list[dict] = []

    chars = 0  # of the raw train text, both sides: clean's and read+write's cost a character

    def add(system: str, task: str, w: int, seconds: float, rss: float | None) -> None:
        values = {"seconds": seconds, "lines_per_s": pairs / seconds, "peak_rss_mb": rss}
        if task in ("data-clean", "data-clean-web", "data-readwrite"):
            values["ns_per_char"] = seconds * w / chars * 1e9  # per worker: what one process spends
        rows.extend(row(system, task, m, pairs, w, v, smoke) for m, v in values.items() if v is not None)
        click.echo(f"{pairs:>10} pairs  {task:<16} {system:<6} workers {w}: {seconds:8.2f} s", err=True)

    corpus = write_corpus(mirror, pairs, root)
    data = root / "data"
    heldout = min(1000, pairs // 20)  # val and test held out of the corpus, 1,000 each as by default
    first = write_params(root / "params-1.yaml", corpus, workers[0], vocab_size, heldout)
    add("ours", "data-download", 1, *run_stage(stage_args("download", first, out=data / "raw"), REPO))
    chars = count_chars(data / "raw")
    add("floor", "data-readwrite", 1, readwrite_floor(data / "raw", root), None)
    for w in workers:
        params = write_params(root / f"params-{w}.yaml", corpus, w, vocab_size, heldout)
        args = stage_args("clean", params, raw=data / "raw", out=data / "clean")
        add("ours", "data-clean", w, *run_stage(args, REPO))
    if web:  # every worker: the rules cost most of it (language ID)
        params = write_params(root / "params-web.yaml", corpus, workers[-1], vocab_size, heldout, web=True)
        args = stage_args("clean", params, raw=data / "raw", out=data / "clean-web")
        add("ours", "data-clean-web", workers[-1], *run_stage(args, REPO))
    args = stage_args("bpe", first, clean=data / "clean", out=data / "bpe")
    add("ours", "data-bpe", cores(), *run_stage(args, REPO))
    binarize = stage_args("binarize", None, clean=data / "clean", bpe=data / "bpe", out=data / "bin")
    if takes_workers("binarize"):
        for w in workers:
            add("ours", "data-binarize", w, *run_stage([*binarize, "--workers", str(w)], REPO))
    else:
        add("ours", "data-binarize", 1, *run_stage(binarize, REPO))
    add("floor", "data-spm-encode", cores(), encode_floor(data / "clean", data / "bpe" / "spm.model"), None)
    return rows


# --- the report ------------------------------------------------------------------------------


def value(rows: list[dict], system: str, task: str, metric: str, pairs: int, workers: int) -> float | None:
    for r in rows:
        if (r["system"], r["task"], r["metric"], r["pairs"], r["workers"]) == (
            system,
            task,
            metric,
            pairs,
            workers,
        ):
            return r["value"]
    return None


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    series = sorted({(r["system"], r["task"], r["workers"]) for r in rows})
    for system, task, workers in series:
        for ax, metric in zip(axes, ("seconds", "peak_rss_mb")):
            points = sorted(
                (r["pairs"], r["value"])
                for r in rows
                if (r["system"], r["task"], r["workers"], r["metric"]) == (system, task, workers, metric)
            )
            if points:
                label = f"{task.removeprefix('data-')} ({system}, {workers} w)"
                ax.plot(*zip(*points), marker="o", label=label)
    for ax, label in zip(axes, ("seconds", "peak RSS (MB), process + workers")):
        ax.set_xlabel("pairs")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def section(rows: list[dict], info: dict[str, str], figure: str) -> str:
    sizes = sorted({r["pairs"] for r in rows})
    lines = [DATA_START, "## Data stages at scale (`bench/data_scale.py`)", ""]
    lines += [markdown_table(["machine", ""], list(info.items())), ""]
    lines += [
        "Peak RSS: the largest sum of the RSS of the stage process and its children (its workers), "
        "sampled every 20 ms. Floors: plain read+write of the raw train files (download, clean) "
        "and sentencepiece encoding with every thread (binarize).",
        "",
        stages_table(rows),
    ]
    lines += ["", *targets_table(targets(rows, sizes)), ""]
    lines += [f"![time and memory against corpus size]({figure})", DATA_END]
    return "\n".join(lines)


def stages_table(rows: list[dict]) -> str:
    """Seconds, lines/s, peak RSS and (clean's, the floor's) ns a character, per size, stage and workers."""
    header = ["pairs", "task", "system", "workers", "seconds", "lines/s", "peak RSS MB"]
    table = []
    for pairs, task, system, workers in sorted(
        {(r["pairs"], r["task"], r["system"], r["workers"]) for r in rows}
    ):
        got = [value(rows, system, task, m, pairs, workers) for m in COLUMNS]
        cells = [
            "" if v is None else fmt(v, 2) if m in ("seconds", "ns_per_char") else fmt_whole(v)
            for m, v in zip(COLUMNS, got)
        ]
        table.append([fmt(pairs), task, system, fmt(workers), *cells])
    return markdown_table([*header, "ns a character and worker"], table, "rllrrrrr")


def targets(rows: list[dict], sizes: list[int]) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for each target set for these stages that these rows can check."""
    out = []

    def workers(w: int) -> str:
        return f"{w} worker{'s' * (w != 1)}"

    stages = sorted({(r["task"], r["workers"]) for r in rows if r["system"] == "ours"})
    if 1_000_000 in sizes and 4_000_000 in sizes:
        for task, w in stages:
            a, b = (value(rows, "ours", task, "seconds", n, w) for n in (1_000_000, 4_000_000))
            if a and b:
                out.append((f"{task}, {workers(w)}: time 4M / 1M <= 4.4", f"{b / a:.2f}", b / a <= 4.4))
    if 1_000_000 in sizes and 10_000_000 in sizes:
        for task, w in stages:
            a, b = (value(rows, "ours", task, "peak_rss_mb", n, w) for n in (1_000_000, 10_000_000))
            if a and b:
                target = f"{task}, {workers(w)}: peak RSS 10M / 1M <= 1.25, and < 2 GB at 10M"
                out.append((target, f"{b / a:.2f} ({b:,.0f} MB)", b / a <= 1.25 and b < 2048))
    for n in sizes:
        for task in ("data-clean", "data-binarize"):
            one, two = (value(rows, "ours", task, "seconds", n, w) for w in (1, 2))
            if one and two:
                target = f"{task} at {n:,} pairs: 2 workers >= 1.7x as fast as 1"
                out.append((target, f"{one / two:.2f}x", one / two >= 1.7))
        floor = value(rows, "floor", "data-readwrite", "ns_per_char", n, 1)
        for task in ("data-clean", "data-clean-web"):
            for w in sorted({r["workers"] for r in rows if r["task"] == task and r["pairs"] == n}):
                cost = value(rows, "ours", task, "ns_per_char", n, w)
                if cost and floor:
                    target = f"{task} at {n:,} pairs, {workers(w)}: <= 100 ns a character and worker"
                    out.append((target, f"{cost:.0f} ns (read+write floor {floor:.2f})", cost <= 100))
        most = max((r["workers"] for r in rows if r["task"] == "data-binarize"), default=0)
        ours, floor = (
            value(rows, "ours", "data-binarize", "seconds", n, most),
            value(rows, "floor", "data-spm-encode", "seconds", n, cores()),
        )
        if ours and floor:
            target = f"data-binarize at {n:,} pairs, {workers(most)}: <= 1.5x sentencepiece's time"
            out.append((target, f"{ours / floor:.2f}x", ours / floor <= 1.5))
    return out


def targets_table(checked: list[tuple[str, str, bool]]) -> list[str]:
    if not checked:
        return ["(The targets need sizes 1M, 4M and 10M, and workers 1 and 2.)"]
    met = sum(ok for _, _, ok in checked)
    table = [[target, measured, "yes" if ok else "**no**"] for target, measured, ok in checked]
    # not escaped: the targets' <= and >= are text, and **no** is bold
    targets = markdown_table(["target", "measured", "met"], table, escape=False)
    return [f"The targets set for these stages: {met} of {len(checked)} met.", "", targets]


@click.command()
@click.option("--sizes", default="1000000,4000000,10000000", show_default=True, help="Corpus sizes in pairs.")
@click.option(
    "--workers", default="1,2", show_default=True, help="Worker counts clean and binarize run with."
)
@click.option("--vocab-size", default=8000, show_default=True, help="bpe.vocab_size.")
@click.option(
    "--mirror", type=click.Path(file_okay=False, path_type=Path), default=None, help="Corpus mirror."
)
@click.option(
    "--out", type=click.Path(path_type=Path), default=REPO / "reports/bench.json", show_default=True
)
@click.option("--md", type=click.Path(path_type=Path), default=REPO / "reports/bench.md", show_default=True)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    default=REPO / "reports/bench_data_scale.png",  # not in figures/: the report stage owns that folder
    show_default=True,
)
@click.option("--smoke", is_flag=True, help="Mark the rows as a smoke run's.")
@click.option(
    "--web/--no-web",
    default=True,
    show_default=True,
    help="Also time clean with the seven web rules on (data-clean-web), with the most workers.",
)
def main(
    sizes: str,
    workers: str,
    vocab_size: int,
    mirror: Path | None,
    out: Path,
    md: Path,
    plot_path: Path,
    smoke: bool,
    web: bool,
) -> None:
    """Time download, clean, bpe and binarize on corpora of --sizes pairs; write rows and a report."""
    mirror = mirror or Path(os.environ.get("CORPUS_MIRROR") or REPO.parent / "shared/corpora")
    if not (mirror / M30K / "train.de.gz").is_file():
        raise click.ClickException(f"{mirror}: no Multi30k train.de.gz; set --mirror or CORPUS_MIRROR")
    counts = [int(s) for s in sizes.split(",")]
    pool = [int(w) for w in workers.split(",")]
    rows: list[dict] = []
    for pairs in counts:
        with tempfile.TemporaryDirectory(prefix="data-scale.") as root:
            rows += measure(mirror, pairs, pool, vocab_size, Path(root), smoke, web)
    merged = merge_rows(out, rows)
    write_json(out, merged)
    # The report shows every size measured so far (a run may add one size to earlier ones).
    rows = [r for r in merged if r["task"].startswith("data-") and r.get("smoke", False) == smoke]
    plot(rows, plot_path)
    figure = os.path.relpath(plot_path, md.parent)
    info = machine_info("workers", max(pool), ["sentencepiece"])
    write_section(md, DATA_START, DATA_END, section(rows, info, figure))
    click.echo(f"wrote {out}, {md}, {plot_path}", err=True)


if __name__ == "__main__":
    main()
