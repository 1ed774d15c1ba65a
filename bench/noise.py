"""A noisy Multi30k: the real training pairs with known shares of the noise web corpora carry.

    CORPUS_MIRROR=../shared/corpora python -m bench.noise make --out data/noise
    python -m bench.noise removed --noise data/noise --clean data/clean   # what a clean run dropped

Seeded and recorded: every planted line's index and kind goes to planted.json beside the
corpus, so that what a cleaning run removed can be told apart per kind, and from the clean pairs
it lost. The kinds, from real text in the mirror (Multi30k ships French and Czech sides of the
same lines):

- misaligned: targets shuffled among themselves (each pair's target is another line's);
- wrong_language: the target replaced by the line's French or Czech side;
- untranslated: the target replaced by the source (an untranslated copy);
- fragment: the target cut to its first two or three words, or replaced by web boilerplate.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from collections import Counter
from pathlib import Path

import click

from pipeline.data.text import normalize

M30K = "raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
KINDS = ("misaligned", "wrong_language", "untranslated", "fragment")
DEFAULT_SHARES = {"misaligned": 0.10, "wrong_language": 0.05, "untranslated": 0.05, "fragment": 0.03}
BOILERPLATE = (
    "Click here to read more.",
    "All rights reserved.",
    "Share this on Facebook and Twitter",
    "Read more at www.example-news.com",
    "Cookies help us deliver our services.",
    "Home | About | Contact",
)


def read_side(mirror: Path, split: str, lang: str) -> list[str]:
    return gzip.decompress((mirror / M30K / f"{split}.{lang}.gz").read_bytes()).decode("utf-8").splitlines()


def plant(
    src: list[str], tgt: list[str], others: list[list[str]], shares: dict[str, float], seed: int
) -> tuple[list[str], dict[str, list[int]]]:
    """The noisy targets, and per kind the indices of the lines planted with it (disjoint)."""
    rng = random.Random(seed)
    order = list(range(len(src)))
    rng.shuffle(order)
    planted: dict[str, list[int]] = {}
    start = 0
    for kind in KINDS:
        n = round(shares.get(kind, 0.0) * len(src))
        planted[kind] = sorted(order[start : start + n])
        start += n
    noisy = list(tgt)
    misaligned = planted["misaligned"]
    if len(misaligned) > 1:  # a derangement: every chosen line gets another chosen line's target
        rotated = misaligned[1:] + misaligned[:1]
        for i, j in zip(misaligned, rotated):
            noisy[i] = tgt[j]
    for i in planted["wrong_language"]:
        noisy[i] = rng.choice(others)[i]
    for i in planted["untranslated"]:
        noisy[i] = src[i]
    for i in planted["fragment"]:
        words = tgt[i].split()
        noisy[i] = rng.choice(BOILERPLATE) if rng.random() < 0.5 else " ".join(words[: rng.randint(2, 3)])
    return noisy, planted


@click.group()
def main() -> None:
    """Plant noise in Multi30k's training pairs, and count what cleaning removed of it."""


@main.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("data/noise"), show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--share",
    "shares",
    type=(click.Choice(KINDS), click.FloatRange(0, 0.5)),
    multiple=True,
    help="KIND SHARE, e.g. --share misaligned 0.2 (default: "
    + ", ".join(f"{k} {v}" for k, v in DEFAULT_SHARES.items())
    + ")",
)
def make(out: Path, seed: int, shares: tuple[tuple[str, float], ...]) -> None:
    """Write OUT/train.{de,en} (Multi30k's training pairs with noise planted) and OUT/planted.json."""
    mirror = os.environ.get("CORPUS_MIRROR")
    if not mirror:
        raise click.ClickException("set CORPUS_MIRROR to the corpus mirror (../shared/corpora)")
    chosen = {**DEFAULT_SHARES, **dict(shares)}
    if sum(chosen.values()) > 0.6:
        raise click.ClickException(f"the shares add up to {sum(chosen.values()):.2f}; keep them at most 0.6")
    root = Path(mirror)
    src, tgt = read_side(root, "train", "de"), read_side(root, "train", "en")
    others = [read_side(root, "train", lang) for lang in ("fr", "cs")]
    noisy, planted = plant(src, tgt, others, chosen, seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (out / "train.en").write_text("\n".join(noisy) + "\n", encoding="utf-8")
    record = {"seed": seed, "shares": chosen, "lines": len(src), "planted": planted}
    (out / "planted.json").write_text(json.dumps(record) + "\n", encoding="utf-8")
    click.echo(", ".join(f"{k}: {len(v)}" for k, v in planted.items()) + f" of {len(src)} lines -> {out}")


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


@main.command()
@click.option("--noise", type=click.Path(file_okay=False, path_type=Path), default=Path("data/noise"))
@click.option("--clean", "clean_dir", type=click.Path(file_okay=False, path_type=Path), required=True)
def removed(noise: Path, clean_dir: Path) -> None:
    """Print, as JSON, the share of each kind of planted noise (and of the clean pairs) that the
    clean stage's output at CLEAN no longer holds."""
    record = json.loads((noise / "planted.json").read_text(encoding="utf-8"))
    src = (noise / "train.de").read_text(encoding="utf-8").splitlines()
    noisy = (noise / "train.en").read_text(encoding="utf-8").splitlines()
    kept = [(clean_dir / f"train.{side}").read_text(encoding="utf-8").splitlines() for side in ("src", "tgt")]
    click.echo(json.dumps(removed_shares(src, noisy, record["planted"], *kept), indent=2))


if __name__ == "__main__":
    main()
