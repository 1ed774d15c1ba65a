"""Tests of the download stage: sources, verification, mirror, network, decoding, held-out splits."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pipeline import files, params
from pipeline.data import corpora, fetch
from pipeline.errors import UserError
from pipeline.params import Bitext, DataParams, SideFiles
from pipeline.stages import download
from tests.helpers import DATA, REPO

BASE = params.load(REPO / "params.yaml")
NONE = SideFiles(None, None, None, None)
M30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No test touches the network or waits: urlopen fails unless a test replaces it; sleeps are recorded."""
    monkeypatch.delenv("CORPUS_MIRROR", raising=False)
    sleeps: list[float] = []
    monkeypatch.setattr(fetch, "_sleep", sleeps.append)

    def no_network(url, timeout=None):
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    return sleeps


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def sides(src: str, tgt: str, src_sha256: str | None = None, tgt_sha256: str | None = None) -> SideFiles:
    return SideFiles(src, tgt, src_sha256, tgt_sha256)


def bitext(train: SideFiles, val: SideFiles = NONE, test: SideFiles = NONE, **changes) -> DataParams:
    """DataParams for corpus: bitext, validated as params.load would."""
    splits = Bitext(train, val, test)
    data = dataclasses.replace(BASE.data, corpus="bitext", mirror=None, bitext=splits, **changes)
    params.validate(dataclasses.replace(BASE, data=data))
    return data


def numbered(tmp_path: Path, n: int, name: str = "c") -> SideFiles:
    """A bitext split of n aligned lines 's{i}' / 't{i}'."""
    src = write(tmp_path / f"{name}.src", "".join(f"s{i}\n" for i in range(n)).encode())
    tgt = write(tmp_path / f"{name}.tgt", "".join(f"t{i}\n" for i in range(n)).encode())
    return sides(src, tgt)


def entries(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


class FakeResponse:
    """What urlopen returns: a body read in chunks, that can fail after `fail_after` bytes."""

    def __init__(self, body: bytes, fail_after: int | None = None, length: int | None = None):
        self.body, self.pos, self.fail_after = body, 0, fail_after
        self.headers = {"Content-Length": str(len(body) if length is None else length)}

    def read(self, n: int = -1) -> bytes:
        if self.fail_after is not None and self.pos >= self.fail_after:
            raise ConnectionResetError("connection reset by peer")
        end = len(self.body) if n < 0 else min(len(self.body), self.pos + n)
        end = end if self.fail_after is None else min(end, self.fail_after)
        chunk, self.pos = self.body[self.pos : end], end
        return chunk

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def serve(monkeypatch, responses: list) -> list[str]:
    """Make urlopen answer with `responses` in turn (an exception is raised); return the URLs asked."""
    asked: list[str] = []

    def urlopen(url, timeout=None):
        asked.append(url)
        answer = responses[min(len(asked), len(responses)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return asked


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


def test_sha256_mismatch_is_refused_and_leaves_nothing(tmp_path):
    train = numbered(tmp_path / "in", 5)
    wrong = "0" * 64
    data = bitext(dataclasses.replace(train, tgt_sha256=wrong))
    out = tmp_path / "raw"
    with pytest.raises(UserError) as e:
        download.download(data, out)
    actual = sha((tmp_path / "in" / "c.tgt").read_bytes())
    assert train.tgt in e.value.message and wrong in e.value.message and actual in e.value.message
    assert entries(tmp_path) == {"in", "in/c.src", "in/c.tgt"}  # no out dir, no temporaries


def test_bad_sha256_param_is_refused(tmp_path):
    data = bitext(dataclasses.replace(numbered(tmp_path, 5), src_sha256="abc"))
    with pytest.raises(UserError, match=r"data\.bitext\.train\.src_sha256"):
        download.download(data, tmp_path / "raw")


def test_missing_local_file_names_it(tmp_path):
    data = bitext(sides(str(tmp_path / "nope.src"), str(tmp_path / "nope.tgt")))
    with pytest.raises(UserError, match="nope.src: no such file"):
        download.download(data, tmp_path / "raw")


# --- mirror and network ----------------------------------------------------------


def test_mirror_path_maps_host_and_path():
    url = "https://raw.githubusercontent.com/a/b/train.de.gz"
    assert fetch.mirror_path(Path("/m"), url) == Path("/m/raw.githubusercontent.com/a/b/train.de.gz")
    with pytest.raises(UserError):
        fetch.mirror_path(Path("/m"), "https://example.org/a/../../etc/passwd")


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


def test_mirror_file_with_a_wrong_sum_is_refused(tmp_path, monkeypatch):
    fake_multi30k_mirror(tmp_path / "mirror", monkeypatch, {"train": 4, "val": 1, "test_2016_flickr": 1})
    bad = fetch.mirror_path(tmp_path / "mirror", f"{M30K}val.en.gz")
    bad.write_bytes(gzip.compress(b"tampered\n"))
    monkeypatch.setenv("CORPUS_MIRROR", str(tmp_path / "mirror"))
    with pytest.raises(UserError) as e:
        download.download(dataclasses.replace(BASE.data, corpus="multi30k"), tmp_path / "raw")
    assert f"{M30K}val.en.gz" in e.value.message and str(bad) in e.value.message
    assert corpora.PINNED_SHA256[f"{M30K}val.en.gz"] in e.value.message
    assert not (tmp_path / "raw").exists()


def test_mirror_missing_a_file_names_the_path_and_the_url(tmp_path, monkeypatch):
    fake_multi30k_mirror(tmp_path / "mirror", monkeypatch, {"train": 4, "val": 1, "test_2016_flickr": 1})
    missing = fetch.mirror_path(tmp_path / "mirror", f"{M30K}val.de.gz")
    missing.unlink()
    monkeypatch.setenv("CORPUS_MIRROR", str(tmp_path / "mirror"))
    with pytest.raises(UserError) as e:
        download.download(dataclasses.replace(BASE.data, corpus="multi30k"), tmp_path / "raw")
    assert str(missing) in e.value.message and f"{M30K}val.de.gz" in e.value.message
    assert not (tmp_path / "raw").exists()


def test_network_failure_is_retried_with_backoff_then_explained(tmp_path, monkeypatch, offline):
    url = "https://example.org/corpus/train.src"
    asked = serve(monkeypatch, [urllib.error.URLError("name resolution failed")])
    data = bitext(sides(url, "https://example.org/corpus/train.tgt"))
    with pytest.raises(UserError) as e:
        download.download(data, tmp_path / "raw")
    assert asked == [url] * 4
    assert offline == [1.0, 2.0, 4.0]
    assert url in e.value.message and "CORPUS_MIRROR" in e.value.message and "data.mirror" in e.value.message
    assert entries(tmp_path) == set()


def test_http_404_is_not_retried(tmp_path, monkeypatch, offline):
    url = "https://example.org/corpus/train.src"
    asked = serve(monkeypatch, [urllib.error.HTTPError(url, 404, "Not Found", {}, None)])
    with pytest.raises(UserError, match="404"):
        download.download(bitext(sides(url, url + "2")), tmp_path / "raw")
    assert asked == [url] and offline == []


def test_network_download_after_a_failed_try(tmp_path, monkeypatch, offline):
    src, tgt = b"eins\nzwei\n", b"one\ntwo\n"
    asked = serve(
        monkeypatch,
        [
            lambda: FakeResponse(src, fail_after=4),  # the connection drops mid-body
            lambda: FakeResponse(src),
            lambda: FakeResponse(tgt),
        ],
    )
    train = sides("https://example.org/s.gz", "https://example.org/t", src_sha256=sha(src))
    data = bitext(train, numbered(tmp_path / "in", 1, "val"), numbered(tmp_path / "in", 1, "test"))
    manifest = download.download(data, tmp_path / "raw")
    assert len(asked) == 3 and offline == [1.0]
    assert files.read_lines(tmp_path / "raw" / "train.src") == ["eins", "zwei"]
    assert manifest["files"]["train.src"]["via"] == "network"
    assert manifest["files"]["train.tgt"]["sha256"] == sha(tgt)


@pytest.mark.parametrize(
    "response",
    [
        lambda: FakeResponse(b"a\nb\nc\n", fail_after=3),  # raises midway
        lambda: FakeResponse(b"a\nb\n", length=100),  # closes early without an error
    ],
)
def test_partial_download_leaves_no_file(tmp_path, monkeypatch, response):
    serve(monkeypatch, [response])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(fetch.FetchError, match="4 tries"):
        fetch.download_url("https://example.org/x", scratch)
    assert entries(scratch) == set()  # every try's part file is gone
    with pytest.raises(UserError):
        download.download(bitext(sides("https://example.org/x", "https://example.org/y")), tmp_path / "raw")
    assert entries(tmp_path) == {"scratch"}


def test_unsupported_scheme_is_refused(tmp_path):
    with pytest.raises(UserError, match="only http"):
        download.download(bitext(sides("ftp://example.org/a", "ftp://example.org/b")), tmp_path / "raw")


# --- decoding --------------------------------------------------------------------


def test_unequal_line_counts_name_both_files_and_counts(tmp_path):
    src = write(tmp_path / "a.src", b"1\n2\n3\n")
    tgt = write(tmp_path / "a.tgt", b"1\n2\n")
    with pytest.raises(UserError) as e:
        download.download(bitext(sides(src, tgt)), tmp_path / "raw")
    assert f"{src} has 3 lines" in e.value.message and f"{tgt} has 2" in e.value.message


def test_invalid_utf8_names_the_file_and_line(tmp_path):
    src = write(tmp_path / "a.src", b"ok\r\nstill ok\r\nbad \xff byte\nok\n")
    tgt = write(tmp_path / "a.tgt", b"1\n2\n3\n4\n")
    with pytest.raises(UserError) as e:
        download.download(bitext(sides(src, tgt)), tmp_path / "raw")
    assert src in e.value.message and "line 3" in e.value.message


def test_bom_crlf_and_cr_line_endings():
    assert fetch.decode_lines("\ufeffa\r\nb\r\n".encode(), "f") == ["a", "b"]
    assert fetch.decode_lines(b"a\rb\rc", "f") == ["a", "b", "c"]  # an old Mac file
    assert fetch.decode_lines(b"a\rx\nb\n", "f") == ["a\rx", "b"]  # a stray CR is no line end
    assert fetch.decode_lines(gzip.compress("\ufeffä\r\n".encode()), "f") == ["ä"]


def test_lines_split_on_lf_only():
    text = "a\x1cb\x85c\u2028d\u2029e\x0bf\x0cg\nh\n"
    assert fetch.decode_lines(text.encode(), "f") == ["a\x1cb\x85c\u2028d\u2029e\x0bf\x0cg", "h"]


def test_empty_lines_are_lines_but_an_empty_file_is_an_error(tmp_path):
    assert fetch.decode_lines(b"\n\n", "f") == ["", ""]
    assert fetch.decode_lines(b"a\n\nb", "f") == ["a", "", "b"]
    for empty in (b"", "\ufeff".encode(), gzip.compress(b"")):
        with pytest.raises(UserError, match="f: the file is empty"):
            fetch.decode_lines(empty, "f")


def test_corrupt_gzip_is_refused():
    with pytest.raises(UserError, match="corrupt or truncated gzip"):
        fetch.decode_lines(gzip.compress(b"a\n" * 100)[:-10], "f")


# --- held-out splits ---------------------------------------------------------------


def test_heldout_splits_are_seeded_disjoint_and_sized(tmp_path):
    data = bitext(numbered(tmp_path / "in", 60), heldout_val=5, heldout_test=7, heldout_seed=3)
    manifest = download.download(data, tmp_path / "a")
    download.download(data, tmp_path / "b")
    download.download(dataclasses.replace(data, heldout_seed=4), tmp_path / "c")

    got = {split: files.read_lines(tmp_path / "a" / f"{split}.src") for split in ("train", "val", "test")}
    assert [len(got[s]) for s in ("train", "val", "test")] == [48, 5, 7]
    numbers = {s: [int(line[1:]) for line in got[s]] for s in got}
    assert sorted(sum(numbers.values(), [])) == list(range(60))  # disjoint and complete
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


def test_multi30k_refuses_unpinned_test_sets_and_unknown_languages(tmp_path):
    data = dataclasses.replace(BASE.data, corpus="multi30k", multi30k_test="test_2017_flickr")
    with pytest.raises(UserError, match="test_2017_flickr has no pinned sha256.*supported: test_2016_flickr"):
        download.download(data, tmp_path / "raw")
    with pytest.raises(UserError, match="data.tgt_lang: Multi30k has no language 'ru'"):
        download.download(dataclasses.replace(BASE.data, corpus="multi30k", tgt_lang="ru"), tmp_path / "raw")
    assert entries(tmp_path) == set()


def test_pinned_table_covers_every_multi30k_file():
    for name in ("train", "val", *corpora.MULTI30K_TESTS):
        for lang in corpora.MULTI30K_LANGS:
            assert len(corpora.PINNED_SHA256[corpora.MULTI30K_URL.format(split=name, lang=lang)]) == 64


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
