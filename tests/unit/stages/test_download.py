"""Tests of the download stage: what it plans and writes, the manifest, the mirror's root, held-out splits.

Fetching, verifying and decoding a file are tests/unit/data/test_fetch.py's.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pipeline import files, params
from pipeline.data import corpora
from pipeline.errors import UserError
from pipeline.params import DataParams
from pipeline.stages import download
from tests.helpers import (
    DATA,
    M30K,
    REPO,
    bitext,
    entries,
    fake_multi30k_mirror,
    numbered,
    serve,
    sha,
    sides,
    write,
)

BASE = params.load(REPO / "params.yaml")

pytestmark = pytest.mark.usefixtures("offline")


# --- local files ---------------------------------------------------------------


def test_local_plain_and_gzip_round_trip(tmp_path):
    train_src = "Ein Hund.\nZwei Katzen.\nDrei Vögel.\n".encode()
    train_tgt = b"A dog.\nTwo cats.\nThree birds.\n"
    # gzip is recognised by its magic bytes: a .txt may be gzip, and a .gz may be plain.
    files_ = {
        "train.src": (tmp_path / "in" / "train.de.gz", gzip.compress(train_src)),
        "train.tgt": (tmp_path / "in" / "train.en.txt", gzip.compress(train_tgt)),
        "val.src": (tmp_path / "in" / "val.de.gz", b"Hallo.\n"),
        "val.tgt": (tmp_path / "in" / "val.en", b"Hello.\n"),
        "test.src": (tmp_path / "in" / "test.de", "Tschüss.".encode()),  # no final newline
        "test.tgt": (tmp_path / "in" / "test.en", b"Bye.\n"),
    }
    paths = {k: write(p, data) for k, (p, data) in files_.items()}
    data = bitext(
        sides(paths["train.src"], paths["train.tgt"], tgt_sha256=sha(files_["train.tgt"][1]).upper()),
        sides(paths["val.src"], paths["val.tgt"]),
        sides(paths["test.src"], paths["test.tgt"]),
    )
    out = tmp_path / "raw"
    manifest = download.download(data, out)

    assert files.read_lines(out / "train.src") == ["Ein Hund.", "Zwei Katzen.", "Drei Vögel."]
    assert files.read_lines(out / "train.tgt") == ["A dog.", "Two cats.", "Three birds."]
    assert files.read_lines(out / "val.src") == ["Hallo."]
    assert (out / "test.src").read_text(encoding="utf-8") == "Tschüss.\n"
    assert json.loads((out / "manifest.json").read_text()) == manifest
    for name, (_, raw) in files_.items():
        record = manifest["files"][name]
        assert record["source"] == paths[name]
        assert record["sha256"] == sha(raw)
        assert record["via"] == "local"
        assert record["lines"] == len(files.read_lines(out / name))
    assert manifest["files"]["train.tgt"]["verified"] == "params"
    assert manifest["files"]["train.src"]["verified"] is None
    assert manifest["heldout"] is None
    outputs = {"raw", "raw/manifest.json", *(f"raw/{name}" for name in manifest["files"])}
    assert {e for e in entries(tmp_path) if not e.startswith("in")} == outputs  # no temporaries left


def test_bad_sha256_param_is_refused(tmp_path):
    data = bitext(dataclasses.replace(numbered(tmp_path, 5), src_sha256="abc"))
    with pytest.raises(UserError, match=r"data\.bitext\.train\.src_sha256"):
        download.download(data, tmp_path / "raw")


# --- the mirror's root: CORPUS_MIRROR, else data.mirror -----------------------------


def test_multi30k_from_a_fake_mirror(tmp_path, monkeypatch):
    fake_multi30k_mirror(tmp_path / "mirror", monkeypatch, {"train": 6, "val": 3, "test_2016_flickr": 2})
    asked = serve(monkeypatch, [AssertionError("the mirror has every file")])
    monkeypatch.setenv("CORPUS_MIRROR", str(tmp_path / "mirror"))
    # The environment variable takes precedence over data.mirror.
    data = dataclasses.replace(BASE.data, corpus="multi30k", mirror=str(tmp_path / "elsewhere"))
    manifest = download.download(data, tmp_path / "raw")
    assert asked == []
    assert files.read_lines(tmp_path / "raw" / "train.src")[-1] == "train de 5"
    assert files.read_lines(tmp_path / "raw" / "test.tgt") == [f"test_2016_flickr en {i}" for i in (0, 1)]
    assert {k: v["lines"] for k, v in manifest["files"].items()} == {
        "train.src": 6,
        "train.tgt": 6,
        "val.src": 3,
        "val.tgt": 3,
        "test.src": 2,
        "test.tgt": 2,
    }
    assert all(r["via"] == "mirror" and r["verified"] == "pinned" for r in manifest["files"].values())
    assert manifest["files"]["val.tgt"]["source"] == f"{M30K}val.en.gz"


def test_data_mirror_is_relative_to_the_current_directory(tmp_path, monkeypatch):
    fake_multi30k_mirror(tmp_path / "mirror", monkeypatch, {"train": 4, "val": 1, "test_2016_flickr": 1})
    monkeypatch.chdir(tmp_path)
    data = dataclasses.replace(BASE.data, corpus="multi30k", mirror="mirror")
    download.download(data, Path("raw"))
    assert len(files.read_lines(tmp_path / "raw" / "train.tgt")) == 4


# --- alignment -------------------------------------------------------------------


def test_unequal_line_counts_name_both_files_and_counts(tmp_path):
    src = write(tmp_path / "a.src", b"1\n2\n3\n")
    tgt = write(tmp_path / "a.tgt", b"1\n2\n")
    with pytest.raises(UserError) as e:
        download.download(bitext(sides(src, tgt)), tmp_path / "raw")
    assert f"{src} has 3 lines" in e.value.message and f"{tgt} has 2" in e.value.message


# --- held-out splits ---------------------------------------------------------------


def test_heldout_splits_are_seeded_disjoint_and_sized(tmp_path):
    data = bitext(numbered(tmp_path / "in", 60), heldout_val=5, heldout_test=7, heldout_seed=3)
    manifest = download.download(data, tmp_path / "a")
    download.download(data, tmp_path / "b")
    download.download(dataclasses.replace(data, heldout_seed=4), tmp_path / "c")

    got = {split: files.read_lines(tmp_path / "a" / f"{split}.src") for split in ("train", "val", "test")}
    assert [len(got[s]) for s in ("train", "val", "test")] == [48, 5, 7]
    numbers = {s: [int(line[1:]) for line in got[s]] for s in got}
    assert sorted(i for split in numbers.values() for i in split) == list(range(60))  # disjoint and complete
    assert all(v == sorted(v) for v in numbers.values())  # corpus order kept
    for split in got:  # still aligned
        assert files.read_lines(tmp_path / "a" / f"{split}.tgt") == [f"t{i}" for i in numbers[split]]
    for split in got:
        name = f"{split}.src"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert files.read_lines(tmp_path / "c" / "val.src") != got["val"]

    assert manifest["heldout"]["splits"] == ["val", "test"] and manifest["heldout"]["seed"] == 3
    assert manifest["files"]["val.src"]["heldout_from"] == "train"
    assert manifest["files"]["test.tgt"]["lines"] == 7
    assert manifest["files"]["train.src"]["lines"] == 48
    assert manifest["files"]["train.src"]["fetched_lines"] == 60


def test_heldout_only_the_missing_split(tmp_path):
    val = sides(write(tmp_path / "v.src", b"v\n"), write(tmp_path / "v.tgt", b"w\n"))
    data = bitext(numbered(tmp_path, 20), val=val, heldout_val=9, heldout_test=4)
    manifest = download.download(data, tmp_path / "raw")
    assert files.read_lines(tmp_path / "raw" / "val.src") == ["v"]
    assert len(files.read_lines(tmp_path / "raw" / "test.src")) == 4
    assert len(files.read_lines(tmp_path / "raw" / "train.src")) == 16
    assert manifest["heldout"]["splits"] == ["test"] and "val" not in manifest["heldout"]


def test_heldout_refused_when_train_is_too_small(tmp_path):
    data = bitext(numbered(tmp_path, 10), heldout_val=3, heldout_test=3)
    with pytest.raises(UserError) as e:
        download.download(data, tmp_path / "raw")
    message = e.value.message
    assert "10 lines" in message and "3 (data.heldout_val) + 3 (data.heldout_test) = 6" in message
    assert "needs 12" in message
    assert "data.heldout_val" in message and "data.heldout_test" in message
    download.download(dataclasses.replace(data, heldout_test=2), tmp_path / "raw")  # 5 left >= 5 held out


def test_heldout_indices_follow_the_documented_method():
    import random

    rng = random.Random(7)
    keys = [rng.random() for _ in range(30)]
    ranked = sorted(range(30), key=lambda i: keys[i])
    assert download.heldout_indices(30, 4, 5, 7) == (sorted(ranked[:4]), sorted(ranked[4:9]))


# --- Multi30k params --------------------------------------------------------------


def test_multi30k_refuses_languages_a_set_lacks(tmp_path):
    with pytest.raises(UserError, match=r"data.tgt_lang: Multi30k set multi30k-train has no language 'ru'"):
        download.download(dataclasses.replace(BASE.data, corpus="multi30k", tgt_lang="ru"), tmp_path / "raw")
    # test_2017_flickr has no Czech side, though train and val have one
    data = dataclasses.replace(BASE.data, corpus="multi30k", tgt_lang="cs", multi30k_test="test_2017_flickr")
    with pytest.raises(
        UserError, match=r"data.tgt_lang: Multi30k set multi30k-test_2017_flickr has no language 'cs'"
    ):
        download.download(data, tmp_path / "raw")
    assert entries(tmp_path) == set()


def test_multi30k_plans_every_test_set_from_the_catalog_in_the_params_direction():
    for test in ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr"):
        data = dataclasses.replace(
            BASE.data, corpus="multi30k", src_lang="en", tgt_lang="de", multi30k_test=test
        )
        plan = download.plan_sources(data)
        assert [(s.location, t.location) for s, t in plan.values()] == [
            (f"{M30K}{name}.en.gz", f"{M30K}{name}.de.gz") for name in ("train", "val", test)
        ]
        assert all(s.location in corpora.PINNED_SHA256 for pair in plan.values() for s in pair)


# --- the click command --------------------------------------------------------------


def write_params(path: Path, data: DataParams) -> Path:
    path.write_text(yaml.safe_dump(dataclasses.replace(BASE, data=data).to_dict()), encoding="utf-8")
    return path


def test_command_writes_the_output_and_refuses_a_bad_sum_in_one_line(tmp_path):
    train = numbered(tmp_path / "in", 40)
    ok = write_params(tmp_path / "ok.yaml", bitext(train, heldout_val=5, heldout_test=5))
    result = CliRunner().invoke(download.command, ["--params", str(ok), "--out", str(tmp_path / "raw")])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {tmp_path / 'raw'}: train 30, val 5, test 5 lines"

    bad = write_params(tmp_path / "bad.yaml", bitext(dataclasses.replace(train, src_sha256="f" * 64)))
    result = CliRunner().invoke(download.command, ["--params", str(bad), "--out", str(tmp_path / "raw2")])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "sha256 mismatch" in errors[0] and train.src in errors[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "raw2").exists()


# --- the real corpora, from the offline mirror (conftest's `mirror` skips without it) ---


def test_real_multi30k_from_the_mirror(tmp_path, monkeypatch, mirror):
    monkeypatch.setenv("CORPUS_MIRROR", str(mirror))
    manifest = download.download(dataclasses.replace(BASE.data, corpus="multi30k"), tmp_path / "raw")
    counts = {name: len(files.read_lines(tmp_path / "raw" / name)) for name in manifest["files"]}
    assert counts == {
        "train.src": 29000,
        "train.tgt": 29000,
        "val.src": 1014,
        "val.tgt": 1014,
        "test.src": 1000,
        "test.tgt": 1000,
    }
    assert all(r["verified"] == "pinned" and r["via"] == "mirror" for r in manifest["files"].values())
    assert files.read_lines(tmp_path / "raw" / "train.tgt")[0].startswith("Two young, White males")


def test_real_tatoeba_ru_en_from_the_ready_made_config(tmp_path, monkeypatch, mirror):
    monkeypatch.setenv("CORPUS_MIRROR", str(mirror))
    raw = BASE.to_dict()
    raw["data"].update(yaml.safe_load((DATA / "tatoeba-ru-en.yaml").read_text())["data"])
    data = params.from_dict(raw).data
    manifest = download.download(data, tmp_path / "raw")
    counts = [len(files.read_lines(tmp_path / "raw" / f"{s}.tgt")) for s in ("train", "val", "test")]
    assert counts == [17425, 1000, 1000]
    assert manifest["files"]["train.src"]["source"].endswith(".rus")
    assert manifest["files"]["train.src"]["verified"] == "pinned"
    assert manifest["heldout"]["seed"] == BASE.data.heldout_seed


def test_real_tico19_en_ms_from_the_ready_made_config(tmp_path, monkeypatch, mirror):
    monkeypatch.setenv("CORPUS_MIRROR", str(mirror))
    raw = BASE.to_dict()
    raw["data"].update(yaml.safe_load((DATA / "tico19-en-ms.yaml").read_text())["data"])
    manifest = download.download(params.from_dict(raw).data, tmp_path / "raw")
    assert [manifest["files"][f"{s}.src"]["lines"] for s in ("train", "val", "test")] == [1300, 300, 500]
    assert manifest["files"]["test.tgt"]["verified"] == "pinned"
