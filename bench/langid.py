"""Language identifiers side by side on real text of this project's languages, for clean's filter.

    pip install py3langid pycld2 lingua-language-detector heliport   # the candidates; any may be absent
    CORPUS_MIRROR=../shared/corpora python -m bench.langid           # -> reports/langid.{md,json}

Each candidate ships its model inside its pip wheel (nothing is downloaded at run time, which
rules out fastText's lid.176 and OpenLID). On the mirror's real lines of de, en, fr, cs (Multi30k
val), ru (newstest2018), ms (TICO-19 and NTREX-128) and id (Tatoeba, Indonesian: Malay's close
relative, the pair every detector confuses), it measures per language the share of lines
identified as their own language (`ms` counting `id` as right and the reverse, as the filter
does: a Malay corpus keeps Indonesian-looking lines), and lines per second on one core, all in
one run. Short lines are where detectors fail: Multi30k's are 12 words on average.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[1]
GH = "raw.githubusercontent.com"
M30K = f"{GH}/multi30k/dataset/master/data/task1/raw"
TESTS = f"{GH}/Helsinki-NLP/OPUS-MT-testsets/master/testsets"
NTREX = f"{GH}/Helsinki-NLP/OPUS-MT-testsets/master/datasets/microsoft/ntrex/NTREX/NTREX-128"
SAMPLES = {  # language -> mirror files of real lines in it
    "de": [f"{M30K}/val.de.gz"],
    "en": [f"{M30K}/val.en.gz"],
    "fr": [f"{M30K}/val.fr.gz"],
    "cs": [f"{M30K}/val.cs.gz"],
    "ru": [f"{TESTS}/ru-en/newstest2018.ru"],
    # Tatoeba's "msa" set is the macrolanguage: its lines are mostly Indonesian; these are Malay
    "ms": [f"{TESTS}/en-ms/tico19-test.ms", f"{NTREX}/newstest2019-ref.msa.txt"],
    "id": [f"{TESTS}/eng-ind/tatoeba-test-v2021-08-07.ind"],
}
SAME = {"ms": {"ms", "id"}, "id": {"ms", "id"}}  # what the filter accepts for each


def read(path: Path, limit: int) -> list[str]:
    raw = path.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return [line for line in text.decode("utf-8").splitlines() if line.strip()][:limit]


def candidates() -> dict[str, Callable[[str], str]]:
    """Each installed detector as line -> ISO 639-1 code (or its own code where it has none)."""
    found: dict[str, Callable[[str], str]] = {}
    try:
        import py3langid

        found["py3langid"] = lambda s: py3langid.classify(s)[0]
    except ImportError:
        pass
    try:
        import pycld2

        def cld2(s: str) -> str:
            try:
                return pycld2.detect(s)[2][0][1]
            except pycld2.error:
                return "un"

        found["pycld2"] = cld2
    except ImportError:
        pass
    try:
        from lingua import LanguageDetectorBuilder

        detector = LanguageDetectorBuilder.from_all_languages().build()

        def lingua(s: str) -> str:
            found_lang = detector.detect_language_of(s)
            return found_lang.iso_code_639_1.name.lower() if found_lang else "un"

        found["lingua"] = lingua
    except ImportError:
        pass
    try:
        import heliport

        identifier = heliport.Identifier()
        found["heliport"] = lambda s: _heliport_code(identifier.identify(s))
    except ImportError:
        pass
    return found


def _heliport_code(code: str) -> str:
    """heliport answers ISO 639-3 with a script (deu_Latn); the filter compares ISO 639-1."""
    iso3 = code.split("_")[0]
    return {
        "deu": "de", "eng": "en", "fra": "fr", "ces": "cs", "rus": "ru", "zsm": "ms", "msa": "ms",
        "ind": "id",
    }.get(iso3, iso3)  # fmt: skip


@click.command()
@click.option("--lines", type=click.IntRange(min=10), default=1000, show_default=True, help="Per language.")
@click.option("--out-md", type=click.Path(path_type=Path), default=ROOT / "reports" / "langid.md")
@click.option("--out-json", type=click.Path(path_type=Path), default=ROOT / "reports" / "langid.json")
def main(lines: int, out_md: Path, out_json: Path) -> None:
    """Accuracy per language and lines/s of each installed language identifier."""
    mirror = os.environ.get("CORPUS_MIRROR")
    if not mirror:
        raise click.ClickException("set CORPUS_MIRROR to the corpus mirror (../shared/corpora)")
    texts = {
        lang: [line for p in paths for line in read(Path(mirror, p), lines)][:lines]
        for lang, paths in SAMPLES.items()
    }
    results: dict[str, dict[str, Any]] = {}
    for name, detect in candidates().items():
        detect("warm up")
        right, seconds, n = {}, 0.0, 0
        for lang, sample in texts.items():
            start = time.perf_counter()
            found = [detect(s) for s in sample]
            seconds += time.perf_counter() - start
            n += len(sample)
            right[lang] = sum(f in SAME.get(lang, {lang}) for f in found) / len(sample)
        results[name] = {"accuracy": right, "lines_per_s": n / seconds}
        click.echo(
            f"{name}: {n / seconds:,.0f} lines/s; " + ", ".join(f"{k} {v:.3f}" for k, v in right.items())
        )
    out_json.write_text(json.dumps({"lines_per_language": lines, "results": results}, indent=2) + "\n")
    langs = list(SAMPLES)
    md = [
        "# Language identifiers on real lines",
        "",
        f"`python -m bench.langid` ({lines} lines per language from the corpus mirror; one core). "
        "Share of lines identified as their own language (ms and id count as one), and lines/s.",
        "",
        "| detector | " + " | ".join(langs) + " | lines/s |",
        "|---|" + "---:|" * (len(langs) + 1),
    ]
    for name, r in results.items():
        cells = [f"{r['accuracy'][lang]:.3f}" for lang in langs]
        md.append(f"| {name} | " + " | ".join(cells) + f" | {r['lines_per_s']:,.0f} |")
    out_md.write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
