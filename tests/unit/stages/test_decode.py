"""Stage decode: aligned hypotheses for val and each test set, stats, and errors, on a tiny random model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from pipeline import lineage
from pipeline import params as P
from pipeline.decoding.translator import Translator
from pipeline.stages import decode as decode_stage
from tests.support.models import make_model_dir, train_spm
from tests.support.repo import REPO

VAL = ["ein hund läuft", "", "die katze springt über die straße", "   ", "der mann"]
TEST = ["das kind", "eine frau läuft über die straße", ""]
TESTS = {"set-b": TEST, "set_a": ["ein mann", "die frau springt"]}  # decoded sorted by name


def setup(tmp_path: Path, **decode: object) -> list[str]:
    """model/, clean/ and params.yaml in tmp_path; returns the command's arguments."""
    make_model_dir(tmp_path / "model")
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["decode"].update(beam=3, n_best=1, batch_tokens=300, max_len_a=1.0, max_len_b=3)
    raw["decode"].update(decode)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "test").mkdir()
    for stem, lines in (("val", VAL), *((f"test/{n}", t) for n, t in TESTS.items())):
        (clean / f"{stem}.src").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return [
        "--params",
        str(tmp_path / "params.yaml"),
        "--model",
        str(tmp_path / "model"),
        "--clean",
        str(clean),
        "--out",
        str(tmp_path / "decode"),
        "--device",
        "cpu",
    ]


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_decode_writes_aligned_hypotheses_and_stats(tmp_path: Path) -> None:
    args = setup(tmp_path)
    result = CliRunner().invoke(decode_stage.command, args)
    assert result.exit_code == 0, result.output
    out = tmp_path / "decode"
    settings = P.load(tmp_path / "params.yaml").decode
    translator = Translator.from_dir(tmp_path / "model", device="cpu", settings=settings)
    for stem, lines in (("val", VAL), *((f"test/{n}", t) for n, t in TESTS.items())):
        hyps = read(out / f"{stem}.hyp")
        assert len(hyps) == len(lines)
        assert hyps == translator.translate(lines)  # the same code path as the translate command
        assert all(h == "" for h, src in zip(hyps, lines) if not src.strip())
    assert not (out / "val.nbest").exists()
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["device"] == "cpu" and stats["decode"]["beam"] == 3
    assert list(stats["test"]) == ["set-b", "set_a"]  # sorted by file name
    assert stats["val"]["sentences"] == len(VAL) and stats["test"]["set-b"]["sentences"] == len(TEST)
    assert stats["test"]["set_a"]["sentences"] == 2
    assert stats["val"]["truncated"] == 0 and stats["val"]["tokens_per_s"] > 0
    lines = [line for line in result.output.splitlines() if " sentences in " in line]  # one per set
    assert [line.split(":")[0] for line in lines] == ["val", "test/set-b", "test/set_a"]


def test_decode_uses_params_yaml_not_the_models_settings(tmp_path: Path) -> None:
    args = setup(tmp_path, beam=1, n_best=1)
    assert CliRunner().invoke(decode_stage.command, args).exit_code == 0
    greedy = Translator.from_dir(tmp_path / "model", device="cpu").translate(VAL, beam=1)
    assert read(tmp_path / "decode" / "val.hyp") == greedy


def test_decode_with_n_best_also_writes_nbest_lists(tmp_path: Path) -> None:
    args = setup(tmp_path, n_best=2)
    assert CliRunner().invoke(decode_stage.command, args).exit_code == 0
    rows = read(tmp_path / "decode" / "test" / "set-b.nbest")
    assert [int(r.split(" ||| ")[0]) for r in rows] == [0, 0, 1, 1, 2]
    assert (tmp_path / "decode" / "val.nbest").is_file()
    hyps = read(tmp_path / "decode" / "test" / "set-b.hyp")
    assert [r.split(" ||| ")[1] for r in rows[::2]] == hyps  # the first of each list is the 1-best


def test_decode_without_clean_output_says_which_stage_to_run(tmp_path: Path) -> None:
    args = setup(tmp_path)
    for path in (tmp_path / "clean" / "test").iterdir():
        path.unlink()
    result = CliRunner().invoke(decode_stage.command, args)
    assert result.exit_code == 1
    assert "no test sets (<name>.src) in it; run the clean stage first" in result.output
    (tmp_path / "clean" / "test").rmdir()
    (tmp_path / "clean" / "val.src").unlink()
    result = CliRunner().invoke(decode_stage.command, args)
    assert result.exit_code == 1 and "val.src: missing; run the clean stage first" in result.output
    assert not (tmp_path / "decode").exists()


SAMPLING = {"enabled": True, "top_k": 0, "top_p": 0.9, "temperature": 1.0, "seed": 5}


def test_decode_with_sampling_writes_seeded_samples(tmp_path: Path) -> None:
    args = setup(tmp_path, beam=1, n_best=2, sampling=SAMPLING)
    assert CliRunner().invoke(decode_stage.command, args).exit_code == 0
    settings = P.load(tmp_path / "params.yaml").decode
    translator = Translator.from_dir(tmp_path / "model", device="cpu", settings=settings)
    lists = translator.translate_nbest(TEST, 2)
    assert read(tmp_path / "decode" / "test" / "set-b.hyp") == [ts[0].text for ts in lists]
    rows = read(tmp_path / "decode" / "test" / "set-b.nbest")
    assert [int(r.split(" ||| ")[0]) for r in rows] == [0, 0, 1, 1, 2]  # two samples a line
    stats = json.loads((tmp_path / "decode" / "stats.json").read_text(encoding="utf-8"))
    assert stats["decode"]["sampling"] == SAMPLING


def test_decode_refuses_sampling_with_a_beam_before_writing(tmp_path: Path) -> None:
    args = setup(tmp_path, beam=3, sampling=SAMPLING)
    result = CliRunner().invoke(decode_stage.command, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert (
        "decode.sampling.enabled: sampling draws one token a step and needs decode.beam=1, not 3"
        in result.output
    )
    assert not (tmp_path / "decode").exists()


def test_decode_with_an_ensemble_records_its_members(tmp_path: Path) -> None:
    other = make_model_dir(tmp_path / "other", seed=4)
    args = setup(tmp_path, ensemble=[str(other)])
    result = CliRunner().invoke(decode_stage.command, args)
    assert result.exit_code == 0, result.output
    settings = P.load(tmp_path / "params.yaml").decode
    translator = Translator.from_dir(tmp_path / "model", device="cpu", settings=settings)
    assert read(tmp_path / "decode" / "val.hyp") == translator.translate(VAL)
    alone = dataclasses.replace(settings, ensemble=())
    assert translator.translate(VAL) != Translator.from_dir(tmp_path / "model", "cpu", alone).translate(VAL)
    stats = json.loads((tmp_path / "decode" / "stats.json").read_text(encoding="utf-8"))
    (member,) = stats["ensemble"]  # DVC tracks the path alone: the weights' digest says which they were
    assert member == {"path": str(other), "model_sha256": lineage.sha256(other / "model.pt")}


def test_decode_refuses_a_member_of_another_vocabulary_before_writing(tmp_path: Path) -> None:
    other = make_model_dir(tmp_path / "other", seed=4)
    train_spm(other / "spm.model", seed=9)
    result = CliRunner().invoke(decode_stage.command, setup(tmp_path, ensemble=[str(other)]))
    assert result.exit_code == 1 and "decode.ensemble[0]: " in result.output
    assert "another vocabulary" in result.output and not (tmp_path / "decode").exists()
