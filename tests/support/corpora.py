"""Corpus files, specs of user data and a fake Multi30k mirror, for the download and fetch tests."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import shutil
from pathlib import Path
from typing import Any

from pipeline import files
from pipeline import params as P
from pipeline.data import corpora, fetch
from pipeline.params import CorpusSpec, DataParams
from tests.support.repo import BASE


def read_tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


# --- corpus files, a fake mirror and a fake network, for the download and fetch tests ------

M30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def sides(src: str, tgt: str, src_sha256: str | None = None, tgt_sha256: str | None = None) -> CorpusSpec:
    """A source of one file per side."""
    return CorpusSpec(src=src, tgt=tgt, src_sha256=src_sha256, tgt_sha256=tgt_sha256)


def user_data(
    train: CorpusSpec, val: CorpusSpec | None = None, test: CorpusSpec | None = None, **changes
) -> DataParams:
    """DataParams whose splits are the user's sources c-train, c-val, c-test (none: 1000 lines held out,
    or data.heldout_* in `changes`), validated."""
    specs = {"c-train": train, "c-val": val, "c-test": test}
    sources = {name: spec for name, spec in specs.items() if spec is not None}
    splits = {split: (f"c-{split}",) if f"c-{split}" in sources else () for split in ("train", "val", "test")}
    held = {f"heldout_{split}": None if splits[split] else 1000 for split in ("val", "test")}
    data = dataclasses.replace(BASE.data, mirror=None, sources=sources, **{**splits, **held, **changes})
    P.validate(dataclasses.replace(BASE, data=data))
    return data


def numbered(tmp_path: Path, n: int, name: str = "c") -> CorpusSpec:
    """A source of n aligned lines 's{i}' / 't{i}'."""
    src = write(tmp_path / f"{name}.src", "".join(f"s{i}\n" for i in range(n)).encode())
    tgt = write(tmp_path / f"{name}.tgt", "".join(f"t{i}\n" for i in range(n)).encode())
    return sides(src, tgt)


def entries(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def fake_multi30k_mirror(root: Path, monkeypatch, n: dict[str, int]) -> None:
    """A Multi30k-like layout under `root`, its sums pinned in place of the real ones."""
    pinned = {}
    for name, count in n.items():
        for lang in ("de", "en"):
            url = f"{M30K}{name}.{lang}.gz"
            body = gzip.compress("".join(f"{name} {lang} {i}\n" for i in range(count)).encode())
            write(fetch.mirror_path(root, url), body)
            pinned[url] = sha(body)
    monkeypatch.setattr(corpora, "PINNED_SHA256", pinned)


def raw_manifest(train: list[str], val: list[str], test: list[str], *, lines: int = 10) -> dict:
    """data/raw/manifest.json in the format of notes/contract.md: per split its sources, each with
    a src and a tgt file at a Multi30k-like URL and that name's made-up sha256 sums."""

    def entry(name: str) -> dict:
        files = [
            {
                "role": role,
                "source": f"{M30K}{name}.{lang}.gz",
                "member": None,
                "via": "network",
                "sha256": sha(f"{name}.{lang}".encode()),
                "verified": "pinned",
            }
            for role, lang in (("src", "de"), ("tgt", "en"))
        ]
        counts = {"lines": lines, "fetched_lines": lines, "max_lines": None}
        return {"name": name, "catalog": True, **counts, "format": "text", "files": files}

    splits = {"train": train, "val": val, "test": test}
    return {
        "src_lang": "de",
        "tgt_lang": "en",
        "splits": {split: [entry(n) for n in names] for split, names in splits.items()},
        "heldout": None,
    }


def clean_split(
    root: Path, src: list[str], tgt: list[str], params: P.CleanParams, train: bool
) -> tuple[list[str], list[str], dict[str, Any]]:
    """The clean stage run on these lines as the train split (train) or as val: (src, tgt, its stats).

    The other splits hold one pair, "v" (val, which decontamination then also drops from train) or
    "zz train only" (train), so that the split is cleaned as the stage cleans it, by the same code.
    """
    from pipeline.stages import clean

    raw, out = root / "raw", root / "clean"
    shutil.rmtree(root, ignore_errors=True)
    (raw / "test").mkdir(parents=True)
    given, other = (src, tgt), (["zz train only"], ["zz train only"])
    splits = {"train": given if train else other, "val": (["v"], ["v"]) if train else given}
    splits["test/t"] = (["t"], ["t"])
    for stem, (s, t) in splits.items():
        files.write_lines(raw / f"{stem}.src", s)
        files.write_lines(raw / f"{stem}.tgt", t)
    stats = clean.clean(params, raw, out)
    stem = "train" if train else "val"
    return files.read_lines(out / f"{stem}.src"), files.read_lines(out / f"{stem}.tgt"), stats[stem]
