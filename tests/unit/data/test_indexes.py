"""mtdata: and sacrebleu: names, resolved offline from the packages' own indexes, refused in one line
with the closest names; and downloaded end to end from a local host at the real URL layout."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
import zipfile

import pytest
from click.testing import CliRunner

from pipeline import files, params
from pipeline.data import fetch, indexes, lock
from pipeline.errors import ParamsError, UserError
from pipeline.stages import corpora as corpora_stage
from pipeline.stages import download
from tests.support.corpora import numbered
from tests.support.corpus_server import CorpusHost
from tests.support.repo import REPO

BASE = params.load(REPO / "params.yaml")
CCMATRIX = "https://object.pouta.csc.fi/OPUS-CCMatrix/v1/moses/en-ms.txt.zip"
WMT20_DEV = "http://data.statmt.org/wmt20/translation-task/dev.tgz"
WMT20_TEST = "https://data.statmt.org/wmt20/translation-task/test.tgz"

pytest.importorskip("mtdata", reason="mtdata: pip install -e .")


# --- resolution ----------------------------------------------------------------------------------


def test_an_opus_id_is_its_moses_zip_with_one_member_per_side_in_the_pairs_order():
    named = indexes.resolve("mtdata:OPUS-ccmatrix-v1-eng-msa", "en", "ms", "data.train[0]")
    assert (named.format, named.origin) == ("text", "mtdata")
    assert [(f.role, f.url, f.member) for f in named.files] == [
        ("src", CCMATRIX, "*.en"),
        ("tgt", CCMATRIX, "*.ms"),
    ]
    backwards = indexes.resolve("mtdata:OPUS-ccmatrix-v1-eng-msa", "ms", "en", "data.train[0]")
    assert [(f.role, f.member) for f in backwards.files] == [("src", "*.ms"), ("tgt", "*.en")]


def test_a_malay_pair_takes_the_sets_filed_under_standard_malay_and_by_region_but_not_indonesian():
    flores = indexes.resolve("mtdata:Flores-flores200_devtest-1-eng-zsm_Latn", "en", "ms", "data.test[0]")
    assert [f.member for f in flores.files] == [
        "flores200_dataset/devtest/eng_Latn.devtest",
        "flores200_dataset/devtest/zsm_Latn.devtest",
    ]
    tatoeba = indexes.resolve("mtdata:OPUS-tatoeba-v20230412-eng-zsm", "ms", "en", "data.train[0]")
    assert [(f.role, f.member) for f in tatoeba.files] == [("src", "*.zsm"), ("tgt", "*.en")]
    listed = {str(e.did) for e in indexes.mtdata_entries("en", "ms")}
    assert {
        "AllenAi-nllb-1-eng-zsm_Latn",
        "Statmt-ccaligned-1-eng-msa_MY",
        "OPUS-ccmatrix-v1-eng-msa",
    } <= listed
    assert not any(ident.endswith(("-ind", "-eng-ind_ID")) for ident in listed)
    assert indexes.pair_order(["eng", "ind"], "en", "ms") is None


def test_a_statmt_id_is_its_tarballs_sgml_members():
    named = indexes.resolve("mtdata:Statmt-newstest_ruen-2018-rus-eng", "ru", "en", "data.test[0]")
    assert named.format == "sgm"
    assert [(f.role, f.url, f.member) for f in named.files] == [
        ("src", WMT20_DEV, "dev/newstest2018-ruen-src.ru.sgm"),
        ("tgt", WMT20_DEV, "dev/newstest2018-ruen-ref.en.sgm"),
    ]


def test_a_sacrebleu_set_is_its_archives_members_with_the_md5_sacrebleu_publishes():
    named = indexes.resolve("sacrebleu:wmt20", "ru", "en", "data.test[0]")
    assert (named.format, named.origin) == ("sgm", "sacrebleu")
    assert [(f.role, f.url, f.member) for f in named.files] == [
        ("src", WMT20_TEST, "sgm/newstest2020-ruen-src.ru.sgm"),
        ("tgt", WMT20_TEST, "sgm/newstest2020-ruen-ref.en.sgm"),
    ]
    assert {f.md5 for f in named.files} == {"3b1f777cfd2fb15ccf66e9bfdb2b1699"}


@pytest.mark.parametrize(
    ("name", "pair", "says"),
    [
        ("mtdata:OPUS-ccmatrx-v1-eng-msa", ("en", "ms"), "closest for en-ms: OPUS-ccmatrix-v1-eng-msa"),
        ("mtdata:not-an-id", ("en", "ms"), "mtdata has no dataset 'not-an-id'"),
        ("mtdata:OPUS-ccmatrix-v1-eng-msa", ("en", "ru"), "is eng-msa, not eng-rus"),
        ("sacrebleu:wmt200", ("ru", "en"), "did you mean wmt20,"),
        ("sacrebleu:wmt20", ("en", "ms"), "sacreBLEU has no set with en-ms"),
        ("sacrebleu:wmt20/tworefs", ("en", "ru"), "it has ru-en, whose source side was written in ru"),
    ],
)
def test_a_name_the_index_lacks_is_refused_in_one_line_with_the_closest(name, pair, says):
    with pytest.raises(ParamsError) as refused:
        indexes.resolve(name, *pair, "data.train[0]")
    message = str(refused.value.message)
    assert says in message and "\n" not in message and message.startswith("data.train[0]: ")


def test_an_entry_naming_one_file_for_both_sides_is_refused_not_read_twice():
    """mtdata 0.5.1's FLORES-101 entries all name flores101_dataset/dev/zul_Latn.dev twice."""
    with pytest.raises(UserError, match=r"names the same file .* for both sides"):
        indexes.resolve("mtdata:Flores-flores101_devtest-1-eng-msa", "en", "ms", "data.test[0]")


def test_corpora_lists_what_an_index_has_for_a_pair():
    result = CliRunner().invoke(corpora_stage.command, ["--pair", "en-ms", "--index", "mtdata"])
    assert result.exit_code == 0, result.output
    assert "mtdata:OPUS-ccmatrix-v1-eng-msa" in result.output and "ccmatrix" in result.output
    result = CliRunner().invoke(corpora_stage.command, ["--pair", "ru-en", "--index", "sacrebleu"])
    assert result.exit_code == 0 and "sacrebleu:wmt20 " in result.output, result.output


# --- download from a host at the real layout -----------------------------------------------------


def zipped(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    return buffer.getvalue()


def tarred(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sgm(lines: list[str]) -> str:
    segs = "".join(f'<seg id="{i}">{line}</seg>\n' for i, line in enumerate(lines, 1))
    return f'<srcset setid="t">\n<doc docid="d">\n{segs}</doc>\n</srcset>\n'


EN = [f"The cat number {i} sleeps." for i in range(40)]
MS = [f"Kucing nombor {i} tidur." for i in range(40)]


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A corpus host serving CCMatrix en-ms and sacreBLEU's wmt20 (synthetic bytes, real URLs), the
    project root in tmp_path (its corpora.lock), and no waiting between tries."""
    served = CorpusHost(tmp_path / "served")
    served.put(
        CCMATRIX, zipped({"CCMatrix.en-ms.en": "\n".join(EN) + "\n", "CCMatrix.en-ms.ms": "\n".join(MS)})
    )
    wmt = tarred(
        {
            "sgm/newstest2020-ruen-src.ru.sgm": sgm(["Кот спит."]),
            "sgm/newstest2020-ruen-ref.en.sgm": sgm(["The cat sleeps."]),
        }
    )
    served.put(WMT20_TEST, wmt)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("CORPUS_MIRROR", served.url)
    monkeypatch.setattr(fetch, "_sleep", lambda s: None)
    with served.running():
        yield served


def en_ms(**changes) -> params.DataParams:
    data = dataclasses.replace(
        BASE.data,
        src_lang="en",
        tgt_lang="ms",
        mirror=None,
        sources={},
        train=("mtdata:OPUS-ccmatrix-v1-eng-msa",),
        val=(),
        test=(),
        heldout_val=5,
        heldout_test=5,
        **changes,
    )
    params.validate(dataclasses.replace(BASE, data=data))
    return data


def test_an_mtdata_corpus_downloads_from_its_host_and_its_sum_is_locked(host, tmp_path):
    manifest = download.download(en_ms(), tmp_path / "raw")
    train = files.read_lines(tmp_path / "raw" / "train.src")
    assert len(train) == len(EN) - 10 and set(train) <= set(EN)  # 5 held out for val, 5 for test
    (record,) = manifest["splits"]["train"]
    assert {f["via"] for f in record["files"]} == {"mirror"} and record["files"][0]["verified"] == "lock"
    assert record["origin"] == "mtdata"  # clean's rules for web data follow it
    body = fetch.mirror_path(host.root, CCMATRIX).read_bytes()
    assert lock.read(lock.lock_path()) == {CCMATRIX: hashlib.sha256(body).hexdigest()}


def test_a_file_that_changed_since_the_lock_is_refused_naming_both_sums_and_nothing_is_written(
    host, tmp_path
):
    download.download(en_ms(), tmp_path / "first")
    before = hashlib.sha256(fetch.mirror_path(host.root, CCMATRIX).read_bytes()).hexdigest()
    changed = host.put(CCMATRIX, zipped({"CCMatrix.en-ms.en": "other\n", "CCMatrix.en-ms.ms": "lain\n"}))
    after = hashlib.sha256(changed.read_bytes()).hexdigest()
    with pytest.raises(UserError) as refused:
        download.download(en_ms(), tmp_path / "raw")
    assert (
        CCMATRIX in refused.value.message
        and before in refused.value.message
        and after in refused.value.message
    )
    assert not (tmp_path / "raw").exists()


def test_a_download_cut_off_midway_is_fetched_again_whole(host, tmp_path):
    host.cut_once.add(host.path_of(CCMATRIX))
    download.download(en_ms(), tmp_path / "raw")
    assert host.asked.count(host.path_of(CCMATRIX)) == 2
    assert len(files.read_lines(tmp_path / "raw" / "train.src")) == len(EN) - 10


def test_the_same_bytes_through_a_mirror_folder_give_the_same_corpus(host, tmp_path, monkeypatch):
    served = download.download(en_ms(), tmp_path / "via-host")
    monkeypatch.setenv("CORPUS_MIRROR", str(host.root))  # the folder the host serves
    folder = download.download(en_ms(), tmp_path / "folder")
    for name in ("train.src", "train.tgt"):
        assert (tmp_path / "folder" / name).read_bytes() == (tmp_path / "via-host" / name).read_bytes()
    sums = lambda m: [f["sha256"] for f in m["splits"]["train"][0]["files"]]
    assert sums(served) == sums(folder)


def test_an_archive_without_the_expected_member_names_the_pattern_and_what_it_holds(host, tmp_path):
    host.put(CCMATRIX, zipped({"README": "no corpus here\n"}))
    with pytest.raises(UserError) as refused:
        download.download(en_ms(), tmp_path / "raw")
    assert "'*.en'" in refused.value.message and "README" in refused.value.message
    assert not (tmp_path / "raw").exists()


def test_a_sacrebleu_test_set_downloads_checked_against_its_md5(host, tmp_path, monkeypatch):
    from sacrebleu.dataset import DATASETS

    data = dataclasses.replace(
        BASE.data,
        src_lang="ru",
        tgt_lang="en",
        mirror=None,
        sources={"own": numbered(tmp_path, 30)},
        train=("own",),
        val=(),
        test=("sacrebleu:wmt20",),
        heldout_val=5,
        heldout_test=None,
    )
    params.validate(dataclasses.replace(BASE, data=data))
    body = fetch.mirror_path(host.root, WMT20_TEST).read_bytes()
    with pytest.raises(UserError) as refused:  # the synthetic archive is not the real one
        download.download(data, tmp_path / "raw")
    assert (
        "md5 mismatch" in refused.value.message
        and "3b1f777cfd2fb15ccf66e9bfdb2b1699" in refused.value.message
    )
    monkeypatch.setattr(DATASETS["wmt20"], "md5", [hashlib.md5(body).hexdigest()])
    download.download(data, tmp_path / "raw")
    assert files.read_lines(tmp_path / "raw" / "test" / "sacrebleu-wmt20.src") == ["Кот спит."]
    assert files.read_lines(tmp_path / "raw" / "test" / "sacrebleu-wmt20.tgt") == ["The cat sleeps."]
