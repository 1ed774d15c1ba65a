"""Tests of the corpora command: the table with and without --pair, the mirror column, --check, bad pairs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.data import corpora
from pipeline.data.corpora import NamedSet, Side
from pipeline.stages import corpora as command_module
from tests.support.corpora import sha, write


def invoke(*args: str, mirror: str | None = None):
    env = {"CORPUS_MIRROR": mirror} if mirror else {"CORPUS_MIRROR": ""}
    return CliRunner().invoke(command_module.command, list(args), env=env)


def test_the_table_lists_every_set_once_with_its_columns():
    result = invoke()
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["name", "langs", "lines", "domain", "license"]
    assert [row.split()[0] for row in rows] == list(corpora.SETS)
    train = next(row for row in rows if row.startswith("multi30k-train "))
    assert train.split()[1:3] == ["de-en-fr-cs", "29000"]
    assert "image descriptions" in train and "Flickr30k" in train


def test_a_pair_lists_the_sets_of_either_direction_in_the_pairs_order():
    rows = invoke("--pair", "en-ru").stdout.splitlines()[1:]
    named = {row.split()[0]: row.split()[1] for row in rows}
    assert set(named) == {s.name for s in corpora.for_pair("ru", "en")}
    assert "newstest2018-ruen" in named and "tatoeba-v2021-08-07-enru" in named
    assert set(named.values()) == {"en-ru"}
    assert {row.split()[1] for row in invoke("--pair", "ru-en").stdout.splitlines()[1:]} == {"ru-en"}


def test_bad_pairs_are_refused_in_one_line():
    result = invoke("--pair", "enru")
    assert result.exit_code == 1
    assert (
        result.stderr.strip()
        == "Error: --pair 'enru': expected two different language codes as SRC-TGT, e.g. de-en"
    )
    result = invoke("--pair", "en-xx")
    assert result.exit_code == 1
    assert "no set in the catalog holds en and xx; its languages: cs, de, en, fr, id, ms, ru" in result.stderr


def fake_set(root: Path, monkeypatch, n: int = 3) -> NamedSet:
    """A one-set catalog whose de side is in the mirror `root` and whose en side is not."""
    url = "https://example.org/c/x.{}"
    body = "".join(f"line {i}\n" for i in range(n)).encode()
    write(root / "example.org/c/x.de", body)
    named = NamedSet(
        "x-deen",
        "X",
        "toys",
        "CC0",
        n,
        (Side("de", url.format("de"), sha(body)), Side("en", url.format("en"), sha(body))),
    )
    monkeypatch.setattr(corpora, "SETS", {named.name: named})
    return named


def test_with_a_mirror_a_column_says_which_sets_it_holds(tmp_path, monkeypatch):
    fake_set(tmp_path, monkeypatch)
    lines = invoke(mirror=str(tmp_path)).stdout.splitlines()
    assert lines[0].split()[-2:] == ["in", "mirror"] and lines[1].split()[-1] == "partly"
    write(tmp_path / "example.org/c/x.en", b"line 0\nline 1\nline 2\n")
    assert invoke(mirror=str(tmp_path)).stdout.splitlines()[1].split()[-1] == "yes"
    assert invoke(mirror=str(tmp_path / "empty")).stdout.splitlines()[1].split()[-1] == "no"


def test_check_names_each_missing_or_mismatching_file_and_fails(tmp_path, monkeypatch):
    named = fake_set(tmp_path, monkeypatch)
    result = invoke("--check", str(tmp_path))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [f"x-deen en: missing ({tmp_path / 'example.org/c/x.en'})"]
    assert "1 file(s) in" in result.stderr

    write(tmp_path / "example.org/c/x.en", b"other\n")
    assert command_module.check([named], tmp_path) == [
        f"x-deen en: sha256 {sha(b'other' + bytes([10]))}, the catalog says {named.sides[1].sha256}"
    ]
    short = dataclasses.replace(named, lines=2, sides=named.sides[:1])
    assert command_module.check([short], tmp_path) == ["x-deen de: 3 lines, the catalog says 2"]


def test_check_passes_on_the_real_mirror(mirror):
    result = invoke("--check", str(mirror))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"89 files of {len(corpora.SETS)} sets match the catalog"


@pytest.mark.parametrize("pair", ["de-en", "en-de"])
def test_the_real_mirror_holds_every_set_of_a_pair(mirror, pair):
    rows = invoke("--pair", pair, mirror=str(mirror)).stdout.splitlines()[1:]
    assert rows and all(row.split()[-1] == "yes" for row in rows)
