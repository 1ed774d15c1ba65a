"""Tests of the download stage: what it plans and writes, the manifest, the mirror's root, held-out splits.

Fetching, verifying and decoding a file are tests/unit/data/test_fetch.py's.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import shlex
import tarfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pipeline import files, params
from pipeline.data import cleaning, corpora, formats, heldout, planning
from pipeline.errors import ParamsError, UserError
from pipeline.params import CorpusSpec, DataParams
from pipeline.stages import clean, download
from tests.support.corpora import M30K, entries, fake_multi30k_mirror, numbered, sha, sides, user_data, write
from tests.support.fake_http import serve
from tests.support.repo import REPO

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
    data = user_data(
        sides(paths["train.src"], paths["train.tgt"], tgt_sha256=sha(files_["train.tgt"][1]).upper()),
        sides(paths["val.src"], paths["val.tgt"]),
        sides(paths["test.src"], paths["test.tgt"]),
    )
    out = tmp_path / "raw"
    manifest = download.download(data, out)

    assert files.read_lines(out / "train.src") == ["Ein Hund.", "Zwei Katzen.", "Drei Vögel."]
    assert files.read_lines(out / "train.tgt") == ["A dog.", "Two cats.", "Three birds."]
    assert files.read_lines(out / "val.src") == ["Hallo."]
    assert (out / "test" / "c-test.src").read_text(encoding="utf-8") == "Tschüss.\n"
    assert json.loads((out / "manifest.json").read_text()) == manifest
    for split in ("train", "val", "test"):
        (source,) = manifest["splits"][split]
        assert source["name"] == f"c-{split}" and source["catalog"] is False and source["format"] == "text"
        for record, side in zip(source["files"], ("src", "tgt")):
            assert record["role"] == side and record["source"] == paths[f"{split}.{side}"]
            assert record["sha256"] == sha(files_[f"{split}.{side}"][1])
            assert record["via"] == "local" and record["member"] is None
    assert manifest["splits"]["train"][0]["lines"] == 3
    assert manifest["splits"]["train"][0]["files"][1]["verified"] == "params"
    assert manifest["splits"]["train"][0]["files"][0]["verified"] is None
    assert manifest["heldout"] is None
    outputs = {"raw", "raw/manifest.json", "raw/test", "raw/test/c-test.src", "raw/test/c-test.tgt"}
    outputs |= {f"raw/{split}.{side}" for split in ("train", "val") for side in ("src", "tgt")}
    assert {e for e in entries(tmp_path) if not e.startswith("in")} == outputs  # no temporaries left


def test_bad_sha256_param_is_refused(tmp_path):
    data = user_data(dataclasses.replace(numbered(tmp_path, 5), src_sha256="abc"))
    with pytest.raises(ParamsError, match=r"data\.sources\.c-train\.src_sha256: 'abc' is not a sha256"):
        download.download(data, tmp_path / "raw")


# --- several sources per split, archives and one-file formats ---------------------------


def tgz(path: Path, members: dict[str, bytes]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return str(path)


def test_sources_of_a_split_are_concatenated_in_order_each_capped_by_max_lines(tmp_path):
    archive = tgz(
        tmp_path / "corpus.tgz",
        {"c/train.de": b"a1\na2\na3\n", "c/train.en": b"A1\nA2\nA3\n", "c/README": b"x\n"},
    )
    tsv = write(tmp_path / "more.tsv.gz", gzip.compress(b"b1\tB1\tx\nb2\tB2\ty\n"))
    data = dataclasses.replace(
        BASE.data,
        sources={
            "arch": CorpusSpec(
                archive=archive, src="c/train.de", tgt="c/train.en", sha256=sha(Path(archive).read_bytes())
            ),
            "tab": CorpusSpec(file=tsv, columns=(0, 1)),
            "first": CorpusSpec(file=tsv, max_lines=1),
            "t": numbered(tmp_path, 2, "t"),
        },
        train=("arch", "tab"),
        val=("first",),
        test=("t",),
    )
    manifest = download.download(data, tmp_path / "raw")
    assert files.read_lines(tmp_path / "raw" / "train.src") == ["a1", "a2", "a3", "b1", "b2"]
    assert files.read_lines(tmp_path / "raw" / "train.tgt") == ["A1", "A2", "A3", "B1", "B2"]
    assert files.read_lines(tmp_path / "raw" / "val.tgt") == ["B1"]
    arch, tab = manifest["splits"]["train"]
    assert (arch["name"], arch["lines"], arch["format"]) == ("arch", 3, "text")
    assert [(f["role"], f["source"], f["member"], f["verified"]) for f in arch["files"]] == [
        ("src", archive, "c/train.de", "params"),
        ("tgt", archive, "c/train.en", "params"),
    ]
    assert (tab["name"], tab["lines"], tab["format"], tab["files"][0]["role"]) == ("tab", 2, "tsv", "both")
    (first,) = manifest["splits"]["val"]
    assert (first["lines"], first["fetched_lines"], first["max_lines"]) == (1, 2, 1)


def test_a_missing_archive_member_names_the_archive_and_what_it_holds(tmp_path):
    archive = tgz(tmp_path / "c.tgz", {"c/train.de": b"a\n", "c/train.en": b"A\n"})
    data = user_data(
        CorpusSpec(archive=archive, src="c/train.de", tgt="c/train.fr"), heldout_val=1, heldout_test=1
    )
    with pytest.raises(UserError) as e:
        download.download(data, tmp_path / "raw")
    assert archive in e.value.message and "c/train.fr" in e.value.message and "c/train.en" in e.value.message
    assert not (tmp_path / "raw").exists()


def test_unknown_names_are_refused_with_the_closest_names(tmp_path):
    data = dataclasses.replace(BASE.data, test=("multi30k-test_2016_flikr",))
    with pytest.raises(
        ParamsError, match=r"data\.test\[0\]: no catalog set .* did you mean multi30k-test_2016_flickr"
    ):
        planning.plan_sources(data)
    clash = dataclasses.replace(BASE.data, sources={"multi30k-val": CorpusSpec(src="a", tgt="b")})
    with pytest.raises(ParamsError, match=r"data\.sources\.multi30k-val: the catalog has a set of that name"):
        planning.plan_sources(clash)


def test_a_catalog_set_can_be_capped_under_a_name_of_ones_own(tmp_path, monkeypatch):
    fake_multi30k_mirror(tmp_path / "mirror", monkeypatch, {"train": 6, "val": 3, "test_2016_flickr": 2})
    monkeypatch.setenv("CORPUS_MIRROR", str(tmp_path / "mirror"))
    data = dataclasses.replace(
        BASE.data,
        sources={"m30k-4": CorpusSpec(catalog="multi30k-train", max_lines=4)},
        train=("m30k-4",),
        test=("multi30k-test_2016_flickr",),
    )
    manifest = download.download(data, tmp_path / "raw")
    assert files.read_lines(tmp_path / "raw" / "train.src") == [f"train de {i}" for i in range(4)]
    assert manifest["splits"]["train"][0]["catalog"] is True


# --- the mirror's root: CORPUS_MIRROR, else data.mirror -----------------------------


def test_multi30k_from_a_fake_mirror(tmp_path, monkeypatch):
    fake_multi30k_mirror(tmp_path / "mirror", monkeypatch, {"train": 6, "val": 3, "test_2016_flickr": 2})
    asked = serve(monkeypatch, [AssertionError("the mirror has every file")])
    monkeypatch.setenv("CORPUS_MIRROR", str(tmp_path / "mirror"))
    # The environment variable takes precedence over data.mirror.
    data = dataclasses.replace(
        BASE.data, mirror=str(tmp_path / "elsewhere"), test=("multi30k-test_2016_flickr",)
    )
    manifest = download.download(data, tmp_path / "raw")
    assert asked == []
    assert files.read_lines(tmp_path / "raw" / "train.src")[-1] == "train de 5"
    test = tmp_path / "raw" / "test" / "multi30k-test_2016_flickr.tgt"
    assert files.read_lines(test) == [f"test_2016_flickr en {i}" for i in (0, 1)]
    assert {split: [s["lines"] for s in sources] for split, sources in manifest["splits"].items()} == {
        "train": [6],
        "val": [3],
        "test": [2],
    }
    records = [f for sources in manifest["splits"].values() for s in sources for f in s["files"]]
    assert all(r["via"] == "mirror" and r["verified"] == "pinned" for r in records)
    assert manifest["splits"]["val"][0]["files"][1]["source"] == f"{M30K}val.en.gz"


def test_data_mirror_is_relative_to_the_current_directory(tmp_path, monkeypatch):
    fake_multi30k_mirror(tmp_path / "mirror", monkeypatch, {"train": 4, "val": 1, "test_2016_flickr": 1})
    monkeypatch.chdir(tmp_path)
    data = dataclasses.replace(BASE.data, mirror="mirror", test=("multi30k-test_2016_flickr",))
    download.download(data, Path("raw"))
    assert len(files.read_lines(tmp_path / "raw" / "train.tgt")) == 4


# --- alignment -------------------------------------------------------------------


def test_unequal_line_counts_name_both_files_and_counts(tmp_path):
    src = write(tmp_path / "a.src", b"1\n2\n3\n")
    tgt = write(tmp_path / "a.tgt", b"1\n2\n")
    with pytest.raises(UserError) as e:
        download.download(user_data(sides(src, tgt)), tmp_path / "raw")
    assert f"{src} has 3 lines" in e.value.message and f"{tgt} has 2" in e.value.message


# --- held-out splits ---------------------------------------------------------------


def test_heldout_splits_are_seeded_disjoint_and_sized(tmp_path):
    data = user_data(numbered(tmp_path / "in", 60), heldout_val=5, heldout_test=7, heldout_seed=3)
    manifest = download.download(data, tmp_path / "a")
    download.download(data, tmp_path / "b")
    download.download(dataclasses.replace(data, heldout_seed=4), tmp_path / "c")

    stems = {"train": "train", "val": "val", "test": "test/heldout"}
    got = {split: files.read_lines(tmp_path / "a" / f"{stem}.src") for split, stem in stems.items()}
    assert [len(got[s]) for s in ("train", "val", "test")] == [48, 5, 7]
    numbers = {s: [int(line[1:]) for line in got[s]] for s in got}
    assert sorted(i for split in numbers.values() for i in split) == list(range(60))  # disjoint and complete
    assert all(v == sorted(v) for v in numbers.values())  # corpus order kept
    for split, stem in stems.items():  # still aligned
        assert files.read_lines(tmp_path / "a" / f"{stem}.tgt") == [f"t{i}" for i in numbers[split]]
        name = f"{stem}.src"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert files.read_lines(tmp_path / "c" / "val.src") != got["val"]

    assert manifest["heldout"]["splits"] == ["val", "test"] and manifest["heldout"]["seed"] == 3
    (val,), (test,), (train,) = (manifest["splits"][s] for s in ("val", "test", "train"))
    assert (val["name"], val["heldout_from"], val["lines"]) == ("heldout", "train", 5)
    assert (test["name"], test["lines"]) == ("heldout", 7)
    assert (train["lines"], train["fetched_lines"]) == (48, 60)


def test_heldout_lines_are_taken_from_every_train_source_and_counted_per_source(tmp_path):
    data = dataclasses.replace(
        user_data(numbered(tmp_path, 30, "a"), heldout_val=4, heldout_test=4),
        sources={"a": numbered(tmp_path, 30, "a"), "b": numbered(tmp_path, 30, "b")},
        train=("a", "b"),
    )
    manifest = download.download(data, tmp_path / "raw")
    a, b = manifest["splits"]["train"]
    val_idx, test_idx = heldout.heldout_indices(60, 4, 4, data.heldout_seed)
    taken = [*val_idx, *test_idx]
    assert a["lines"] == 30 - sum(i < 30 for i in taken) and b["lines"] == 30 - sum(i >= 30 for i in taken)
    assert a["lines"] + b["lines"] == len(files.read_lines(tmp_path / "raw" / "train.src")) == 52


def test_heldout_only_the_missing_split(tmp_path):
    val = sides(write(tmp_path / "v.src", b"v\n"), write(tmp_path / "v.tgt", b"w\n"))
    data = user_data(numbered(tmp_path, 20), val=val, heldout_test=4)
    manifest = download.download(data, tmp_path / "raw")
    assert files.read_lines(tmp_path / "raw" / "val.src") == ["v"]
    assert len(files.read_lines(tmp_path / "raw" / "test" / "heldout.src")) == 4
    assert len(files.read_lines(tmp_path / "raw" / "train.src")) == 16
    assert manifest["heldout"]["splits"] == ["test"] and "val" not in manifest["heldout"]


def test_heldout_refused_when_train_is_too_small(tmp_path):
    data = user_data(numbered(tmp_path, 10), heldout_val=3, heldout_test=3)
    with pytest.raises(UserError) as e:
        download.download(data, tmp_path / "raw")
    message = e.value.message
    assert "10 lines" in message and "3 (data.heldout_val) + 3 (data.heldout_test) = 6" in message
    assert "needs 12" in message
    assert "data.heldout_val" in message and "data.heldout_test" in message
    download.download(dataclasses.replace(data, heldout_test=2), tmp_path / "raw")  # 5 left >= 5 held out


def test_sources_stream_in_chunks_with_the_same_output_as_whole_files(tmp_path, monkeypatch):
    """Chunks of a few bytes cut every line, CRLF and multi-byte character; the files do not change."""
    archive = tgz(
        tmp_path / "c.tgz", {"a.de": "ä1\r\nä2\r\nä3".encode(), "a.en": "\ufeffA1\nA2\nA3\n".encode()}
    )
    tsv = write(tmp_path / "t.tsv.gz", gzip.compress("".join(f"b{i}é\tB{i}\n" for i in range(40)).encode()))
    data = dataclasses.replace(
        BASE.data,
        sources={
            "arch": CorpusSpec(archive=archive, src="a.de", tgt="a.en"),
            "tab": CorpusSpec(file=tsv, max_lines=30),
            "n": numbered(tmp_path, 25),
        },
        train=("arch", "tab", "n"),
        val=(),
        test=("n",),
        heldout_val=7,
    )
    whole = download.download(data, tmp_path / "whole")
    monkeypatch.setattr(formats, "CHUNK", 3)
    monkeypatch.setattr(files, "CHUNK", 5)
    assert download.download(data, tmp_path / "chunked") == whole
    for path in sorted((tmp_path / "whole").rglob("*.*")):
        assert path.read_bytes() == (tmp_path / "chunked" / path.relative_to(tmp_path / "whole")).read_bytes()
    assert files.read_lines(tmp_path / "whole" / "train.src")[:3] == ["ä1", "ä2", "ä3"]
    train_lines = len(files.read_lines(tmp_path / "whole" / "train.src"))
    assert sum(s["lines"] for s in whole["splits"]["train"]) == train_lines == 3 + 30 + 25 - 7


# --- catalog sets -----------------------------------------------------------------


def test_catalog_sets_refuse_languages_they_lack(tmp_path):
    with pytest.raises(
        ParamsError, match=r"data.train\[0\]: catalog set multi30k-train has no language 'ru'"
    ):
        download.download(dataclasses.replace(BASE.data, tgt_lang="ru"), tmp_path / "raw")
    # test_2017_flickr has no Czech side, though train and val have one
    data = dataclasses.replace(BASE.data, tgt_lang="cs")
    with pytest.raises(
        ParamsError, match=r"data.test\[1\]: catalog set multi30k-test_2017_flickr has no language 'cs'"
    ):
        download.download(data, tmp_path / "raw")
    assert entries(tmp_path) == set()


def test_catalog_sets_are_planned_in_the_params_direction():
    data = dataclasses.replace(BASE.data, src_lang="en", tgt_lang="de")
    plan = planning.plan_sources(data)
    names = {
        "train": ["train"],
        "val": ["val"],
        "test": [t.removeprefix("multi30k-") for t in BASE.data.test],
    }
    for split, sources in plan.items():
        assert [s.name for s in sources] == [f"multi30k-{n}" for n in names[split]]
        assert [tuple(f.source.location for f in s.files) for s in sources] == [
            (f"{M30K}{n}.en.gz", f"{M30K}{n}.de.gz") for n in names[split]
        ]
        assert all(f.source.location in corpora.PINNED_SHA256 for s in sources for f in s.files)


# --- the click command --------------------------------------------------------------


def write_params(path: Path, data: DataParams) -> Path:
    path.write_text(yaml.safe_dump(dataclasses.replace(BASE, data=data).to_dict()), encoding="utf-8")
    return path


def test_command_writes_the_output_and_refuses_a_bad_sum_in_one_line(tmp_path):
    train = numbered(tmp_path / "in", 40)
    ok = write_params(tmp_path / "ok.yaml", user_data(train, heldout_val=5, heldout_test=5))
    result = CliRunner().invoke(download.command, ["--params", str(ok), "--out", str(tmp_path / "raw")])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {tmp_path / 'raw'}: train 30, val 5, test heldout 5 lines"

    bad = write_params(tmp_path / "bad.yaml", user_data(dataclasses.replace(train, src_sha256="f" * 64)))
    result = CliRunner().invoke(download.command, ["--params", str(bad), "--out", str(tmp_path / "raw2")])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "sha256 mismatch" in errors[0] and str(train.src) in errors[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "raw2").exists()


def test_a_parent_that_is_no_model_directory_stops_the_command_in_one_line(tmp_path):
    """train.init_from is read here already: a tagged parent's child keeps its tags (test_multilingual)."""
    params = dataclasses.replace(
        BASE,
        data=user_data(numbered(tmp_path / "in", 40), heldout_val=5, heldout_test=5),
        train=dataclasses.replace(BASE.train, init_from=str(tmp_path / "nowhere")),
    )
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params.to_dict()), encoding="utf-8")
    result = CliRunner().invoke(download.command, ["--params", str(path), "--out", str(tmp_path / "raw")])
    assert result.exit_code == 2 and "Traceback" not in result.output  # a settings error, as ParamsError's
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"train.init_from: {tmp_path / 'nowhere'}: no such directory" in errors[0]
    assert not (tmp_path / "raw").exists()


# --- the real corpora, from the offline mirror (conftest's `mirror` skips without it) ---


def test_real_multi30k_from_the_mirror(tmp_path, monkeypatch, mirror):
    monkeypatch.setenv("CORPUS_MIRROR", str(mirror))
    manifest = download.download(BASE.data, tmp_path / "raw")
    raw = tmp_path / "raw"
    counts = {str(p.relative_to(raw)): len(files.read_lines(p)) for p in sorted(raw.rglob("*.src"))}
    assert counts == {
        "train.src": 29000,
        "val.src": 1014,
        "test/multi30k-test_2016_flickr.src": 1000,
        "test/multi30k-test_2017_flickr.src": 1000,
        "test/multi30k-test_2017_mscoco.src": 461,
        "test/multi30k-test_2018_flickr.src": 1071,
    }
    records = [f for sources in manifest["splits"].values() for s in sources for f in s["files"]]
    assert len(records) == 12 and all(r["verified"] == "pinned" and r["via"] == "mirror" for r in records)
    assert files.read_lines(raw / "train.tgt")[0].startswith("Two young, White males")


PAIRS_PAGE = REPO / "docs" / "other-pairs.md"


def pair_experiment(name: str) -> dict:
    """The params of docs/other-pairs.md's `dvc exp run -n NAME ... -S key=value` command, applied to BASE."""
    text = PAIRS_PAGE.read_text(encoding="utf-8").replace("\\\n", " ")
    (command,) = [line for line in text.splitlines() if line.strip().startswith(f"dvc exp run -n {name} ")]
    raw = BASE.to_dict()
    for setting in shlex.split(command)[5:]:
        if setting == "-S":
            continue
        key, value = setting.split("=", 1)
        *path, last = key.split(".")
        node = raw
        for part in path:
            node = node[part]
        assert last in node, f"{PAIRS_PAGE.name}: {key} is not a key of params.yaml"
        node[last] = yaml.safe_load(value)
    return raw


@pytest.mark.parametrize("pair", ["ru-en", "ru-en-news", "ru-en-seed-2", "ru-en-news-seed-2", "en-ms"])
def test_the_documented_pair_commands_set_only_keys_of_params_yaml_to_valid_values(pair):
    """Without the mirror: each -S key exists (pair_experiment asserts it) and the params validate."""
    data = params.from_dict(pair_experiment(pair)).data
    assert (data.src_lang, data.tgt_lang) == tuple(pair.split("-")[:2])


@pytest.mark.parametrize("pair", ["ru-en", "en-ms"])
def test_the_documented_pair_experiments_download_from_the_catalog_and_clean_keeps_tests_out_of_training(
    tmp_path, monkeypatch, mirror, pair
):
    monkeypatch.setenv("CORPUS_MIRROR", str(mirror))
    data = params.from_dict(pair_experiment(pair)).data
    assert (data.src_lang, data.tgt_lang) == tuple(pair.split("-"))
    manifest = download.download(data, tmp_path / "raw")
    records = [f for sources in manifest["splits"].values() for s in sources for f in s["files"]]
    assert records and all(r["verified"] == "pinned" for r in records)
    assert {s["name"] for s in manifest["splits"]["test"]} == set(data.test)
    # ... and clean keeps every line of every test set out of training
    clean.clean(params.from_dict(pair_experiment(pair)).clean, tmp_path / "raw", tmp_path / "clean")
    train = set(files.read_lines(tmp_path / "clean" / "train.src"))
    for test in data.test:
        assert not train & set(files.read_lines(tmp_path / "clean" / "test" / f"{test}.src")), test


# --- sources that ship tokenized ------------------------------------------------------------


def test_a_tokenized_source_is_marked_in_the_manifest_and_its_held_out_lines_listed(tmp_path):
    moses = dataclasses.replace(numbered(tmp_path, 30, "m"), tokenized="moses")
    data = dataclasses.replace(
        user_data(numbered(tmp_path, 30, "a"), heldout_val=4, heldout_test=4),
        sources={"a": numbered(tmp_path, 30, "a"), "m": moses},
        train=("a", "m"),
    )
    manifest = download.download(data, tmp_path / "raw")
    a, m = manifest["splits"]["train"]
    assert "tokenized" not in a and m["tokenized"] == "moses"
    val_idx, _ = heldout.heldout_indices(60, 4, 4, data.heldout_seed)
    (val,) = manifest["splits"]["val"]
    want = [("a", sum(i < 30 for i in val_idx), None), ("m", sum(i >= 30 for i in val_idx), "moses")]
    assert [(p["name"], p["lines"], p["tokenized"]) for p in val["parts"]] == [w for w in want if w[1]]
    assert "parts" not in manifest["heldout"]
    # clean reads the parts: the held-out lines of m are the last ones of val
    ranges = cleaning.tokenized_ranges(manifest, "val")
    assert ranges == (((4 - want[1][1], 4),) if want[1][1] else ())


def test_without_a_tokenized_source_the_manifest_is_as_before(tmp_path):
    data = user_data(numbered(tmp_path, 30), heldout_val=4, heldout_test=4)
    manifest = download.download(data, tmp_path / "raw")
    assert "tokenized" not in manifest["splits"]["train"][0]
    assert "parts" not in manifest["splits"]["val"][0]


def test_tokenized_is_refused_on_a_catalog_source_which_says_it_itself():
    data = dataclasses.replace(
        BASE.data, sources={"x": CorpusSpec(catalog="multi30k-val", tokenized="moses")}
    )
    with pytest.raises(ParamsError, match=r"data.sources.x: tokenized: not with catalog"):
        params.validate_data(data)


def test_mlqe_pe_from_the_mirror_is_read_from_its_archive_and_detokenized_by_clean(tmp_path, mirror):
    data = dataclasses.replace(
        BASE.data,
        src_lang="ru",
        tgt_lang="en",
        mirror=str(mirror),
        train=("mlqe-pe-ruen-dev",),
        val=("mlqe-pe-ruen-test",),
        test=("ntrex128-enru",),
    )
    manifest = download.download(data, tmp_path / "raw")
    (train,) = manifest["splits"]["train"]
    assert (train["lines"], train["tokenized"]) == (1000, "moses")
    assert [f["member"] for f in train["files"]] == ["ru-en-dev/dev.src", "ru-en-dev/dev.pe"]
    raw_en = files.read_lines(tmp_path / "raw" / "train.tgt")
    assert sum(" 't " in f"{line} " or " , " in line for line in raw_en) > 100  # as MLQE-PE ships it
    stats = clean.clean(BASE.clean, tmp_path / "raw", tmp_path / "clean")
    en = files.read_lines(tmp_path / "clean" / "val.tgt")
    assert len(en) == 1000 and stats["val"]["detokenized"]["tgt"] > 500
    assert not any(" , " in line or " 't " in line or line.endswith(" .") for line in en)
    assert stats["train"]["lines_in"] == 1000 and stats["train"]["detokenized"]["src"] > 500
    assert "detokenized" not in stats["test"]["ntrex128-enru"]  # NTREX is plain text: untouched
