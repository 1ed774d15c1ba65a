"""The catalog of named parallel sets (catalog.yaml, shipped as data) and the sha256 pinned for each URL.

A set has one line-aligned file per language, each with its URL and sha256
(or a member of an archive: the archive's URL and sha256, and the member's path).
A set serves either direction: `for_pair("en", "ru")` finds ru-en sets with
their sides in en, ru order. A file whose URL is in the catalog is verified
against its pinned sum wherever it is named (a catalog set in data.train,
val or test, or a URL in data.sources).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.errors import UserError

CATALOG = Path(__file__).with_name("catalog.yaml")


@dataclass(frozen=True)
class Side:
    """One language's file of a set."""

    lang: str  # ISO 639-1
    url: str
    sha256: str  # of the file at url (for a member: of the archive)
    member: str | None = None  # the file's path inside the archive at url


@dataclass(frozen=True)
class NamedSet:
    """A named, line-aligned set: its sides in catalog order (or in the order a pair asked for)."""

    name: str
    corpus: str
    domain: str
    license: str
    lines: int
    sides: tuple[Side, ...]
    tokenized: str | None = (
        None  # how its text was tokenized (pipeline.data.detok.TOKENIZERS); clean undoes it
    )

    @property
    def langs(self) -> tuple[str, ...]:
        return tuple(side.lang for side in self.sides)

    def side(self, lang: str) -> Side:
        for side in self.sides:
            if side.lang == lang:
                return side
        raise UserError(f"set {self.name} has no {lang} side; it has {', '.join(self.langs)}")

    def oriented(self, src: str, tgt: str) -> NamedSet:
        """This set with exactly the sides `src`, `tgt`, in that order."""
        return dataclasses.replace(self, sides=(self.side(src), self.side(tgt)))


def load_catalog(path: Path = CATALOG) -> dict[str, NamedSet]:
    """The catalog's sets by name, in file order."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {name: _named_set(name, entry) for name, entry in raw.items()}


def _named_set(name: str, entry: dict) -> NamedSet:
    sides = tuple(
        Side(lang, side["url"], side["sha256"], side.get("member")) for lang, side in entry["sides"].items()
    )
    return NamedSet(
        name,
        entry["corpus"],
        entry["domain"],
        entry["license"],
        int(entry["lines"]),
        sides,
        entry.get("tokenized"),
    )


SETS: dict[str, NamedSet] = load_catalog()

# sha256 of every file this project knows by URL; fetch.py checks each fetched URL against it.
PINNED_SHA256: dict[str, str] = {side.url: side.sha256 for s in SETS.values() for side in s.sides}


def lookup(name: str) -> NamedSet:
    """The set called `name`; an unknown name is refused with the closest known names."""
    if name in SETS:
        return SETS[name]
    close = difflib.get_close_matches(name, SETS, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else "`python -m pipeline corpora` lists them"
    raise UserError(f"no set named {name!r} in the catalog; {hint}")


def for_pair(src: str, tgt: str) -> list[NamedSet]:
    """The sets that hold both languages, each oriented src -> tgt (whatever order the catalog has)."""
    return [s.oriented(src, tgt) for s in SETS.values() if src in s.langs and tgt in s.langs]


def parse_pair(pair: str) -> tuple[str, str]:
    """`de-en` -> ("de", "en"); anything else is refused with the expected form."""
    parts = pair.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise UserError(f"--pair {pair!r}: expected two different language codes as SRC-TGT, e.g. de-en")
    return parts[0], parts[1]
