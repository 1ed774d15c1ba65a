"""Command `corpora`: list the named sets of pipeline/data/catalog.yaml, or check them against a mirror.

`--pair en-ru` keeps the sets that hold both languages, in either direction,
their languages shown in the pair's order. `--index mtdata` or `--index sacrebleu`
lists what that index has for the pair instead (names to put in a split as
`mtdata:ID` or `sacrebleu:SET`: pipeline/data/indexes.py). With CORPUS_MIRROR set, a column
says whether each set's files are in the mirror. `--check MIRROR` reads every
listed file there and compares its sha256 and line count with the catalog's.
Not a DVC stage: it writes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from pipeline.data import corpora, indexes
from pipeline.data.containers import archive_member
from pipeline.data.corpora import NamedSet
from pipeline.data.fetch import mirror_path, sha256_file
from pipeline.data.formats import text_lines
from pipeline.errors import UserError

COLUMNS = ("name", "langs", "lines", "domain", "license")


def listed(pair: str | None) -> list[NamedSet]:
    """Every set, or those holding the pair's two languages, oriented as the pair says."""
    if pair is None:
        return list(corpora.SETS.values())
    src, tgt = corpora.parse_pair(pair)
    sets = corpora.for_pair(src, tgt)
    if not sets:
        langs = sorted({lang for s in corpora.SETS.values() for lang in s.langs})
        raise UserError(
            f"--pair {pair}: no set in the catalog holds {src} and {tgt}; its languages: {', '.join(langs)}"
        )
    return sets


def index_table(index: str, src: str, tgt: str) -> list[str]:
    """What mtdata or sacreBLEU has for the pair, as aligned columns with the name to use."""
    if index == "mtdata":
        header = ["name", "corpus", "version", "langs"]  # mtdata's index has no sizes
        rows = [
            [f"{indexes.MTDATA}{e.did}", e.did.name, e.did.version, e.did.lang_str]
            for e in indexes.mtdata_entries(src, tgt)
        ]
    else:
        header = ["name", "pair", "description"]
        rows = [
            [f"{indexes.SACREBLEU}{n}", f"{src}-{tgt}", d.description]
            for n, d in indexes.sacrebleu_sets(src, tgt)
        ]
    if not rows:
        raise UserError(f"--index {index}: nothing for {src}-{tgt}")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]


def table(sets: list[NamedSet], mirror: Path | None) -> list[str]:
    """The sets as aligned text columns, with an `in mirror` column when a mirror is given."""
    header = [*COLUMNS, "in mirror"] if mirror else list(COLUMNS)
    rows = [header]
    for named in sets:
        row = [named.name, "-".join(named.langs), str(named.lines), named.domain, named.license]
        rows.append([*row, _in_mirror(named, mirror)] if mirror else row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def _in_mirror(named: NamedSet, mirror: Path) -> str:
    present = sum(mirror_path(mirror, side.url).is_file() for side in named.sides)
    return "yes" if present == len(named.sides) else "no" if present == 0 else "partly"


def check(sets: list[NamedSet], mirror: Path) -> list[str]:
    """What in `mirror` differs from the catalog: one line per missing or mismatching file."""
    problems = []
    for named in sets:
        for side in named.sides:
            path = mirror_path(mirror, side.url)
            if not path.is_file():
                problems.append(f"{named.name} {side.lang}: missing ({path})")
                continue
            got = sha256_file(path)
            if got != side.sha256:
                problems.append(f"{named.name} {side.lang}: sha256 {got}, the catalog says {side.sha256}")
                continue  # its line count means nothing once the bytes differ
            data = path.read_bytes()
            if side.member is not None:
                data = archive_member(data, side.member, side.url)
            lines = len(text_lines(data, side.url))
            if lines != named.lines:
                problems.append(f"{named.name} {side.lang}: {lines} lines, the catalog says {named.lines}")
    return problems


@click.command("corpora")
@click.option(
    "--pair", default=None, help="SRC-TGT, e.g. de-en: only sets with both languages, either direction."
)
@click.option(
    "--index",
    type=click.Choice(["catalog", "mtdata", "sacrebleu"]),
    default="catalog",
    show_default=True,
    help="Whose sets to list: the catalog's, or mtdata's or sacreBLEU's for --pair.",
)
@click.option(
    "--check",
    "check_mirror",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A mirror root: verify every listed file there (sha256 and line count) against the catalog.",
)
def command(pair: str | None, check_mirror: Path | None, index: str) -> None:
    """List the catalog's named sets (name, languages, lines, domain, license), or an index's."""
    if index != "catalog":
        if pair is None:
            raise UserError(f"--index {index}: name a pair with --pair SRC-TGT (its lists are long)")
        for line in index_table(index, *corpora.parse_pair(pair)):
            click.echo(line)
        return
    sets = listed(pair)
    if check_mirror is not None:
        problems = check(sets, check_mirror)
        for problem in problems:
            click.echo(problem)
        if problems:
            raise UserError(
                f"{len(problems)} file(s) in {check_mirror} differ from the catalog (listed above)"
            )
        n_files = len({side.url for named in sets for side in named.sides})
        click.echo(f"{n_files} files of {len(sets)} sets match the catalog")
        return
    mirror = os.environ.get("CORPUS_MIRROR")
    folder = Path(mirror) if mirror and "://" not in mirror else None
    for line in table(sets, folder):
        click.echo(line)
