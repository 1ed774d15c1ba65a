"""Fetching a corpus file: local path, mirror or network (retries, partial downloads), its sha256.

Most tests go through download.download, the one caller, with a user source that names the file.
"""

from __future__ import annotations

import dataclasses
import gzip
import urllib.error
from pathlib import Path

import pytest

from pipeline import files
from pipeline.data import corpora, fetch
from pipeline.errors import UserError
from pipeline.stages import download
from tests.support.corpora import M30K, entries, fake_multi30k_mirror, numbered, sha, sides, user_data, write
from tests.support.fake_http import serve
from tests.support.repo import BASE

pytestmark = pytest.mark.usefixtures("offline")

# Multi30k with the one test set fake_multi30k_mirror makes
ONE_TEST = dataclasses.replace(BASE.data, test=("multi30k-test_2016_flickr",))


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


# --- local files and their sums -------------------------------------------------------


def test_sha256_mismatch_is_refused_and_leaves_nothing(tmp_path):
    train = numbered(tmp_path / "in", 5)
    wrong = "0" * 64
    data = user_data(dataclasses.replace(train, tgt_sha256=wrong))
    out = tmp_path / "raw"
    with pytest.raises(UserError) as e:
        download.download(data, out)
    actual = sha((tmp_path / "in" / "c.tgt").read_bytes())
    assert train.tgt in e.value.message and wrong in e.value.message and actual in e.value.message
    assert entries(tmp_path) == {"in", "in/c.src", "in/c.tgt"}  # no out dir, no temporaries


def test_missing_local_file_names_it(tmp_path):
    data = user_data(sides(str(tmp_path / "nope.src"), str(tmp_path / "nope.tgt")))
    with pytest.raises(UserError, match=r"nope.src: no such file"):
        download.download(data, tmp_path / "raw")


# --- the mirror -----------------------------------------------------------------------


def test_mirror_path_maps_host_and_path():
    url = "https://raw.githubusercontent.com/a/b/train.de.gz"
    assert fetch.mirror_path(Path("/m"), url) == Path("/m/raw.githubusercontent.com/a/b/train.de.gz")
    with pytest.raises(UserError):
        fetch.mirror_path(Path("/m"), "https://example.org/a/../../etc/passwd")


def test_mirror_file_with_a_wrong_sum_is_refused(tmp_path, monkeypatch):
    fake_multi30k_mirror(tmp_path / "mirror", monkeypatch, {"train": 4, "val": 1, "test_2016_flickr": 1})
    bad = fetch.mirror_path(tmp_path / "mirror", f"{M30K}val.en.gz")
    bad.write_bytes(gzip.compress(b"tampered\n"))
    monkeypatch.setenv("CORPUS_MIRROR", str(tmp_path / "mirror"))
    with pytest.raises(UserError) as e:
        download.download(ONE_TEST, tmp_path / "raw")
    assert f"{M30K}val.en.gz" in e.value.message and str(bad) in e.value.message
    assert corpora.PINNED_SHA256[f"{M30K}val.en.gz"] in e.value.message
    assert not (tmp_path / "raw").exists()


def test_mirror_missing_a_file_names_the_path_and_the_url(tmp_path, monkeypatch):
    fake_multi30k_mirror(tmp_path / "mirror", monkeypatch, {"train": 4, "val": 1, "test_2016_flickr": 1})
    missing = fetch.mirror_path(tmp_path / "mirror", f"{M30K}val.de.gz")
    missing.unlink()
    monkeypatch.setenv("CORPUS_MIRROR", str(tmp_path / "mirror"))
    with pytest.raises(UserError) as e:
        download.download(ONE_TEST, tmp_path / "raw")
    assert str(missing) in e.value.message and f"{M30K}val.de.gz" in e.value.message
    assert not (tmp_path / "raw").exists()


# --- the network ----------------------------------------------------------------------


def test_network_failure_is_retried_with_backoff_then_explained(tmp_path, monkeypatch, offline):
    url = "https://example.org/corpus/train.src"
    asked = serve(monkeypatch, [urllib.error.URLError("name resolution failed")])
    data = user_data(sides(url, "https://example.org/corpus/train.tgt"))
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
        download.download(user_data(sides(url, url + "2")), tmp_path / "raw")
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
    data = user_data(train, numbered(tmp_path / "in", 1, "val"), numbered(tmp_path / "in", 1, "test"))
    manifest = download.download(data, tmp_path / "raw")
    assert len(asked) == 3 and offline == [1.0]
    assert files.read_lines(tmp_path / "raw" / "train.src") == ["eins", "zwei"]
    src_record, tgt_record = manifest["splits"]["train"][0]["files"]
    assert src_record["via"] == "network"
    assert tgt_record["sha256"] == sha(tgt)


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
        data = user_data(sides("https://example.org/x", "https://example.org/y"))
        download.download(data, tmp_path / "raw")
    assert entries(tmp_path) == {"scratch"}


def test_unsupported_scheme_is_refused(tmp_path):
    with pytest.raises(UserError, match="only http"):
        download.download(user_data(sides("ftp://example.org/a", "ftp://example.org/b")), tmp_path / "raw")


# --- decoding -------------------------------------------------------------------------


def test_invalid_utf8_names_the_file_and_line(tmp_path):
    src = write(tmp_path / "a.src", b"ok\r\nstill ok\r\nbad \xff byte\nok\n")
    tgt = write(tmp_path / "a.tgt", b"1\n2\n3\n4\n")
    with pytest.raises(UserError) as e:
        download.download(user_data(sides(src, tgt)), tmp_path / "raw")
    assert src in e.value.message and "line 3" in e.value.message
