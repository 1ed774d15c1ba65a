"""A noisy Multi30k: the real training pairs, and among them noisy pairs of the kinds web corpora
carry, in known shares; what a cleaning removed of each kind; the report of the runs trained on
each cleaning (the command: pipeline/stages/noise.py; the method: docs/cleaning.md).

Every real pair stays, so that what the noise costs is the noise's own, not lost data, and the
noisy corpus with exactly the added lines removed is the clean one. Seeded and recorded: every
added line's index and kind goes to planted.json beside the corpus. Each noisy pair takes a real
line's source (a line lends once), with a target from real text in the mirror (Multi30k ships
French and Czech sides of the same lines):

- misaligned: the targets of the lending lines shuffled among them (each gets another's);
- wrong_language: the line's French or Czech side;
- untranslated: the source itself (an untranslated copy);
- fragment: the target's first two or three words, or web boilerplate.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pipeline import files
from pipeline.data.text import normalize
from pipeline.errors import UserError
from pipeline.experiments import archive as run_archive
from pipeline.reporting.hypotheses import RunHypotheses, label
from pipeline.reporting.metrics import SIGNIFICANCE_LEVEL
from pipeline.reporting.significance import Comparison, compare, comparison_markdown
from pipeline.reporting.tables import markdown_table

M30K = "raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
KINDS = ("misaligned", "wrong_language", "untranslated", "fragment")
# noisy pairs added, as shares of the real ones: 70% more lines, 41% of the corpus noise
DEFAULT_SHARES = {"misaligned": 0.30, "wrong_language": 0.15, "untranslated": 0.15, "fragment": 0.10}
BOILERPLATE = (
    "Click here to read more.",
    "All rights reserved.",
    "Share this on Facebook and Twitter",
    "Read more at www.example-news.com",
    "Cookies help us deliver our services.",
    "Home | About | Contact",
)


def read_side(mirror: Path, split: str, lang: str) -> list[str]:
    path = mirror / M30K / f"{split}.{lang}.gz"
    if not path.is_file():
        raise UserError(f"{path}: no such file; CORPUS_MIRROR must be the corpus mirror (../shared/corpora)")
    return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()


def plant(
    src: list[str], tgt: list[str], others: list[list[str]], shares: dict[str, float], seed: int
) -> tuple[list[str], list[str], dict[str, list[int]]]:
    """The real pairs with noisy pairs added among them, as a crawl's noise comes: per kind, a share
    of the real lines (disjoint) lends its source to a noisy pair. Returns both sides, and per kind
    the indices of the added lines; every other line is a real pair, all of them kept."""
    rng = random.Random(seed)
    order = list(range(len(src)))
    rng.shuffle(order)
    lenders: dict[str, list[int]] = {}
    start = 0
    for kind in KINDS:
        n = round(shares.get(kind, 0.0) * len(src))
        lenders[kind] = order[start : start + n]
        start += n
    noise: list[tuple[str, str, str]] = []
    misaligned = lenders["misaligned"]  # a derangement: each gets another chosen line's target
    noise += [("misaligned", src[i], tgt[j]) for i, j in zip(misaligned, misaligned[1:] + misaligned[:1])]
    noise += [("wrong_language", src[i], rng.choice(others)[i]) for i in lenders["wrong_language"]]
    noise += [("untranslated", src[i], src[i]) for i in lenders["untranslated"]]
    for i in lenders["fragment"]:
        words = tgt[i].split()
        cut = rng.choice(BOILERPLATE) if rng.random() < 0.5 else " ".join(words[: rng.randint(2, 3)])
        noise.append(("fragment", src[i], cut))
    lines: list[tuple[str, str, str]] = [("clean", s, t) for s, t in zip(src, tgt)] + noise
    rng.shuffle(lines)
    planted: dict[str, list[int]] = {kind: [] for kind in KINDS}
    for index, (kind, _, _) in enumerate(lines):
        if kind != "clean":
            planted[kind].append(index)
    return [s for _, s, _ in lines], [t for _, _, t in lines], planted


def make(mirror: Path, out: Path, shares: dict[str, float], seed: int) -> tuple[int, dict[str, list[int]]]:
    """Write OUT/train.{de,en} (Multi30k's training pairs with noise planted, at `shares` over the
    defaults) and OUT/planted.json; return the real pairs' count and the indices planted per kind."""
    chosen = {**DEFAULT_SHARES, **shares}
    if sum(chosen.values()) > 1:
        raise UserError(
            f"the shares add up to {sum(chosen.values()):.2f}; each noisy pair borrows a real line's "
            "source, a line lends once: keep them at most 1"
        )
    src, tgt = read_side(mirror, "train", "de"), read_side(mirror, "train", "en")
    others = [read_side(mirror, "train", lang) for lang in ("fr", "cs")]
    noisy_src, noisy_tgt, planted = plant(src, tgt, others, chosen, seed)
    out.mkdir(parents=True, exist_ok=True)
    files.write_lines(out / "train.de", noisy_src)
    files.write_lines(out / "train.en", noisy_tgt)
    record = {"seed": seed, "shares": chosen, "real_lines": len(src), "planted": planted}
    files.write_text(out / "planted.json", json.dumps(record) + "\n")
    return len(src), planted


def removed_shares(
    src: list[str], noisy: list[str], planted: dict[str, list[int]], kept_src: list[str], kept_tgt: list[str]
) -> dict[str, dict[str, float]]:
    """Per kind (and "clean" for the pairs planted with none), the pairs, those removed and the
    share; pairs are matched by their normalized text, as clean writes it, each kept pair once."""
    kept = Counter(zip(kept_src, kept_tgt))
    kinds = {i: kind for kind, lines in planted.items() for i in lines}
    counts = {kind: [0, 0] for kind in [*planted, "clean"]}
    for i, (s, t) in enumerate(zip(src, noisy)):
        pair = (normalize(s), normalize(t))
        kind = kinds.get(i, "clean")
        counts[kind][0] += 1
        if kept[pair]:
            kept[pair] -= 1
        else:
            counts[kind][1] += 1
    return {k: {"pairs": n, "removed": r, "share": r / n if n else 0.0} for k, (n, r) in counts.items()}


def removed(noise: Path, clean_dir: Path) -> dict[str, dict[str, float]]:
    """The share of each kind of planted noise (and of the clean pairs) that the clean stage's output
    at `clean_dir` no longer holds."""
    needed = [noise / name for name in ("planted.json", "train.de", "train.en")]
    needed += [clean_dir / f"train.{side}" for side in ("src", "tgt")]
    if missing := [str(path) for path in needed if not path.is_file()]:
        raise UserError(
            f"no {', '.join(missing)}: make the noisy corpus (`python -m pipeline noise make`) and clean "
            "it with the clean stage first"
        )
    record = json.loads((noise / "planted.json").read_text(encoding="utf-8"))
    src, noisy = files.read_lines(noise / "train.de"), files.read_lines(noise / "train.en")
    kept = [files.read_lines(clean_dir / f"train.{side}") for side in ("src", "tgt")]
    return removed_shares(src, noisy, record["planted"], *kept)


# The experiment's runs, archived under reports/noise/runs/<name>.json, in the report's order; what
# each cleaning run removed is reports/noise/removed/<name>.json (`removed`'s output)
RUNS = {
    "clean": "(a) clean corpus",
    "noisy-clean-today": "(b) noisy, four base rules",
    "noisy-web-rules": "noisy, + seven web rules",
    "noisy-web-score": "(c) noisy, + web rules and model score",
}
FLICKR = "test/multi30k-test_2016_flickr"


def report(folder: Path, refs: Path) -> tuple[dict[str, Any], str]:
    """The report's data and markdown: per run of the experiment archived in `folder`, what its
    cleaning removed of each kind of noise, and BLEU/chrF on val and the test sets with sacreBLEU's
    paired bootstrap against the clean corpus's run (a) and the noisy one with the base rules (b)."""
    present = [name for name in RUNS if run_archive.path_of(folder / "runs", name).is_file()]
    if present[:2] != list(RUNS)[:2]:
        raise UserError(f"{folder}/runs/ needs clean.json and noisy-clean-today.json, runs (a) and (b)")
    archived = {name: run_archive.load(run_archive.path_of(folder / "runs", name)) for name in present}
    hyps = {}
    for name, run in archived.items():
        if run.hyps is None:
            raise UserError(f"{folder}/runs/{name}.json has no hypotheses; archive a scored run")
        hyps[name] = RunHypotheses(RUNS[name], run.hyps.hyps, run.hyps.refs_sha256)
    names = present
    against_a = compare(hyps[names[0]], [hyps[n] for n in names[1:]], refs)
    against_b = compare(hyps[names[1]], [hyps[n] for n in names[2:]], refs)
    removed = {  # a cleaning's removed shares, whether or not a model was trained on its output
        name: json.loads(path.read_text(encoding="utf-8"))
        for name in list(RUNS)[1:]
        if (path := folder / "removed" / f"{name}.json").is_file()
    }
    speed_file = folder / "speed.json"
    body = {
        "runs": {name: {"label": RUNS[name], "run_id": archived[name].record.id} for name in names},
        "removed": removed,
        "speed": json.loads(speed_file.read_text(encoding="utf-8")) if speed_file.is_file() else None,
        "scores": _scores(against_a, against_b),
        "recovered": _recovered(against_a),
        "copies": {name: copied_shares(hyps[name].hyps, refs) for name in names},
    }
    return body, _markdown(body, against_a, against_b)


def copied_shares(hyps: dict[str, list[str]], refs: Path) -> dict[str, float]:
    """Per test set, the share of a run's translations that copy their source (letters and digits
    alike, case aside): the untranslated copies a model learns from untranslated pairs."""
    letters = lambda line: re.sub(r"\W+", "", line.lower())
    shares = {}
    for key, lines in hyps.items():
        source = refs / f"{key}.src"
        if key.startswith("test/") and source.is_file():
            sources = source.read_text(encoding="utf-8").splitlines()
            same = sum(bool(letters(h)) and letters(h) == letters(s) for h, s in zip(lines, sources))
            shares[key] = same / max(len(lines), 1)
    return shares


def _scores(against_a: Comparison, against_b: Comparison) -> dict[str, dict[str, dict[str, object]]]:
    """Per set and run: BLEU and chrF, their intervals, and the difference and p against (a) and (b)."""
    out: dict[str, dict[str, dict[str, object]]] = {}
    by_b = {split.split: split.scores for split in against_b.splits}
    for split in against_a.splits:
        rows = out.setdefault(split.split, {})
        for label_, scores in split.scores.items():
            row: dict[str, object] = {}
            for metric, c in scores.items():
                row[metric] = {"score": c.score, "ci95": list(c.ci95), "vs_a": [c.delta, c.p_value]}
                b = by_b.get(split.split, {}).get(label_)
                if b is not None and b[metric].p_value is not None:
                    row[metric]["vs_b"] = [b[metric].delta, b[metric].p_value]  # type: ignore[index]
            rows[label_] = row
    return out


def _recovered(against_a: Comparison) -> dict[str, float] | None:
    """On test_2016_flickr, the share of the BLEU the noise cost (b) that each later run recovered."""
    split = next((s for s in against_a.splits if s.split == FLICKR), None)
    if split is None:
        return None
    a, b, *later = (scores["bleu"].score for scores in split.scores.values())
    lost = a - b
    names = list(split.scores)[2:]
    return {name: round((score - b) / lost, 3) for name, score in zip(names, later)} if lost > 0 else None


def _copies_table(copies: dict[str, dict[str, float]]) -> str:
    sets = sorted({key for shares in copies.values() for key in shares})
    rows = [
        [RUNS[name], *(f"{100 * shares.get(k, 0.0):.1f}%" for k in sets)] for name, shares in copies.items()
    ]
    return markdown_table(["run", *(label(k) for k in sets)], rows, "l" + "r" * len(sets))


def _shares_text() -> str:
    names = {"wrong_language": "wrong language", "fragment": "fragments or boilerplate"}
    return ", ".join(f"{100 * share:.0f}% {names.get(kind, kind)}" for kind, share in DEFAULT_SHARES.items())


def _subsections(markdown: str) -> str:
    """A comparison's per-set headings one level down, under the report's own."""
    return re.sub(r"(?m)^## ", "### ", markdown)


def _markdown(body: dict, against_a: Comparison, against_b: Comparison) -> str:
    kinds = [*KINDS, "clean"]
    rows = []
    for name, shares in body["removed"].items():
        rows.append(
            [RUNS[name], *(f"{100 * shares[k]['share']:.{2 if k == 'clean' else 1}f}%" for k in kinds)]
        )
    planted: dict[str, dict[str, float]] = next(iter(body["removed"].values()), {})
    header = [
        "run",
        *(f"{k.replace('_', ' ')} ({planted[k]['pairs']:,})" if k in planted else k for k in kinds),
    ]
    header[-1] = header[-1].replace("clean", "clean pairs lost")
    lines = [
        "# Cleaning a noisy corpus: what the rules and the model score remove, and what it is worth",
        "",
        "Multi30k de→en's 29,000 training pairs, and among them noisy pairs added (`python -m pipeline noise",
        "make`, seed 1; as shares of the real pairs:",
        f"{_shares_text()}), cleaned",
        "in turn with the four base rules (b), the seven rules for web data, and those with the model",
        "score (c), each used to train the default model; (a) trains on the real pairs alone, which is",
        "also the noisy corpus with exactly the added lines removed: the most any filter can keep.",
        "Made by `python -m pipeline noise report --refs data/raw` from the runs archived in",
        "`reports/noise/runs/` and the removed shares in `reports/noise/removed/`; how each",
        "run was made is in docs/cleaning.md.",
        "",
        "## Removed, per kind of planted noise",
        "",
        markdown_table(header, rows, "l" + "r" * len(kinds)),
        "",
        "## Untranslated output: translations that copy their source",
        "",
        _copies_table(body["copies"]),
        "",
        "## Translation quality against the clean corpus's run (a)",
        "",
        _subsections(comparison_markdown(against_a)),
        "",
        "## Against the noisy corpus with the base rules (b)",
        "",
        _subsections(comparison_markdown(against_b)),
    ]
    if body["speed"]:
        lines += _speed_lines(body["speed"])
    if body["recovered"]:
        shares = ", ".join(f"{name}: {100 * share:.0f}%" for name, share in body["recovered"].items())
        lines += ["", f"Share of the {label(FLICKR)} BLEU that (b) lost against (a) recovered: {shares}."]
    lines.append(f"\nSignificant: p < {SIGNIFICANCE_LEVEL}.")
    return "\n".join(lines) + "\n"


def _speed_lines(speed: dict[str, Any]) -> list[str]:
    """The section on what the model score costs, from bench/pair_score_speed.py's JSON."""
    table = [
        [r["score"], str(r["threads"]), f"{r['pairs_per_s']:,.0f}", f"{r['per_core']:,.0f}"]
        for r in speed["rows"]
    ]
    return [
        "",
        f"## What the model score costs ({speed['pairs']:,} pairs, `python -m bench.pair_score_speed`)",
        "",
        markdown_table(["score", "threads", "pairs/s", "pairs/s a core"], table, "lrrr"),
        "",
        markdown_table(["machine", ""], list(speed["machine"].items())),
    ]
