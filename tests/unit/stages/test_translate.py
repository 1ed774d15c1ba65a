"""The translate command: stdin/stdout and files, blank and invalid lines, n-best rows, refusals."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import yaml
from click.testing import CliRunner

from pipeline import files
from pipeline.decoding import batches as decoding_batches
from pipeline.decoding import translator as tr
from pipeline.decoding.translator import Translator
from pipeline.model import checkpoint
from pipeline.stages import translate as translate_stage
from tests.support.models import make_model_dir


def run(args: list[str], stdin: bytes = b""):
    return CliRunner().invoke(translate_stage.command, args, input=stdin)


def test_command_reads_stdin_with_blank_and_invalid_utf8_lines(model_dir: Path, translator: Translator):
    stdin = b"ein hund\n\n   \n\xff\xfe katze\r\nder mann"  # no final newline; a CRLF line
    result = run(["--model", str(model_dir), "--device", "cpu"], stdin)
    assert result.exit_code == 0, result.output
    lines = result.stdout_bytes.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines[:-1]) == 5
    assert lines[1] == lines[2] == ""
    want = translator.translate(["ein hund", "", "", "\ufffd\ufffd katze\r", "der mann"])
    assert lines[:-1] == want
    assert "warning: 1 input line(s) were not valid UTF-8" in result.stderr


def test_command_writes_output_file_atomically(model_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("ein hund\n\ndie frau\n", encoding="utf-8")
    out = tmp_path / "out" / "hyp.txt"
    args = ["--model", str(model_dir), "--device", "cpu", "--input", str(source), "--output", str(out)]
    result = run(args)
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").count("\n") == 3
    assert result.stdout == ""
    assert [p.name for p in out.parent.iterdir()] == ["hyp.txt"]  # no temporary left behind


def test_command_n_best_format(model_dir: Path) -> None:
    result = run(["--model", str(model_dir), "--device", "cpu", "--n-best", "3"], b"ein hund\n\nder mann\n")
    assert result.exit_code == 0, result.output
    pattern = r"(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d{4})"
    rows = [re.fullmatch(pattern, line) for line in result.stdout.splitlines()]
    assert all(rows), result.stdout
    index = [int(r.group(1)) for r in rows]
    assert index == sorted(index) and set(index) == {0, 1, 2}
    assert index.count(0) == index.count(2) == 3
    assert index.count(1) == 1  # a blank line gives one, empty, hypothesis
    for i in (0, 2):
        scores = [float(r.group(3)) for r in rows if int(r.group(1)) == i]
        assert scores == sorted(scores, reverse=True)


def test_command_refuses_n_best_above_beam(model_dir: Path) -> None:
    result = run(["--model", str(model_dir), "--beam", "2", "--n-best", "3"], b"ein hund\n")
    assert result.exit_code == 1
    assert "--n-best: must be within [1, --beam=2]" in result.output


def test_command_on_a_missing_model_says_how_to_fix_it(tmp_path: Path) -> None:
    result = run(["--model", str(tmp_path / "nothing")], b"ein hund\n")
    assert result.exit_code == 1
    assert "no such checkpoint" in result.output and "Traceback" not in result.output


def test_decoder_only_model_translates_through_the_command(tmp_path: Path) -> None:
    model_dir = make_model_dir(tmp_path / "model", arch="decoder_only")
    result = run(["--model", str(model_dir), "--device", "cpu", "--beam", "2"], b"ein hund\n \nkind\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 3 and result.stdout.split("\n")[1] == ""


def test_interactive_mode_prompts_and_answers_each_line(translator: Translator, capsys) -> None:
    out = io.BytesIO()
    render = translate_stage.renderer(translator, n_best=1, beam=None, batch_tokens=None)
    invalid = translate_stage.translate_stream(
        render, io.BytesIO(b"ein hund\n\xffkind\n"), out, interactive=True
    )
    assert invalid == 1
    assert out.getvalue().decode("utf-8").split("\n")[:-1] == translator.translate(["ein hund", "\ufffdkind"])
    assert capsys.readouterr().err.count("> ") == 3  # one prompt per line, and one answered by EOF


def test_quantization_needs_the_ctranslate2_backend(model_dir: Path) -> None:
    result = run(["--model", str(model_dir), "--device", "cpu", "--quantization", "int8"], b"ein hund\n")
    assert result.exit_code == 1
    assert "--quantization int8 needs --backend ctranslate2" in result.output


def test_workers_reach_the_search_and_change_no_output(model_dir: Path, monkeypatch) -> None:
    searches = []  # (workers, batches) of each search
    search_batches = decoding_batches.search_batches

    def recording(model, fitted, batches, run, *, workers, **kwargs):
        searches.append((workers, len(batches)))
        return search_batches(model, fitted, batches, run, workers=workers, **kwargs)

    monkeypatch.setattr(decoding_batches, "search_batches", recording)
    lines = "ein hund\nder mann läuft über die straße\n\ndie katze\neine frau springt\n".encode()
    args = ["--model", str(model_dir), "--device", "cpu", "--batch-tokens", "40"]  # a batch a sentence or two
    one, three = run([*args, "--workers", "1"], lines), run([*args, "--workers", "3"], lines)
    assert one.exit_code == three.exit_code == 0, one.output + three.output
    assert [w for w, _ in searches] == [1, 3] and all(n > 1 for _, n in searches)
    assert one.stdout == three.stdout and one.stdout.count("\n") == 5
    refused = run([*args, "--workers", "2", "--backend", "ctranslate2"], lines)
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "--workers applies to the torch backend" in refused.output and "drop --workers" in refused.output


def test_command_samples_with_a_seed_as_the_translator_does(model_dir: Path, translator: Translator) -> None:
    lines = ["ein hund", "", "der mann läuft über die straße", "die katze"]
    stdin = "".join(line + "\n" for line in lines).encode()
    args = ["--model", str(model_dir), "--device", "cpu", "--sample", "--seed", "3", "--top-p", "0.95"]
    first, again = run(args, stdin), run(args, stdin)
    assert first.exit_code == again.exit_code == 0, first.output
    assert first.stdout == again.stdout
    assert first.stdout.split("\n")[:-1] == translator.translate(lines, sample=True, seed=3, top_p=0.95)
    other = run([*args[:-4], "--seed", "4", "--top-p", "0.95"], stdin)
    assert other.exit_code == 0 and other.stdout != first.stdout


def test_command_n_best_with_sampling_writes_k_samples(model_dir: Path) -> None:
    args = ["--model", str(model_dir), "--device", "cpu", "--sample", "--n-best", "4", "--temperature", "2"]
    result = run(args, b"ein hund\n\nder mann\n")
    assert result.exit_code == 0, result.output
    index = [int(line.split(" ||| ")[0]) for line in result.stdout.splitlines()]
    assert index == [0] * 4 + [1] + [2] * 4  # more than the model's beam of 3: samples, not a beam


def test_command_refuses_sampling_options_that_cannot_apply(model_dir: Path) -> None:
    base = ["--model", str(model_dir), "--device", "cpu"]
    cases = [
        (["--sample", "--beam", "2"], "--sample: sampling draws one token a step and needs --beam=1, not 2"),
        (["--top-k", "5"], "--top-k: applies to sampling only; turn it on with --sample"),
        (["--sample", "--backend", "ctranslate2"], "--sample: ctranslate2 does not sample here"),
        (["--sample", "--top-p", "1.5"], "--top-p: must be within (0, 1] (1: no limit)"),
        (["--beam", "0"], "--beam: must be at least 1 (1 is greedy)"),
    ]
    for options, message in cases:
        result = run([*base, *options], b"ein hund\n")
        assert result.exit_code == 1 and message in result.output, result.output
        assert "Traceback" not in result.output and result.stdout == ""
    bad = run([*base, "--top-k", "many"], b"ein hund\n")  # a value of the wrong type: click's usage error
    assert bad.exit_code == 2 and "--top-k" in bad.output


def test_a_bad_setting_is_refused_before_the_model_is_loaded(
    model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    saved = tmp_path / "model"  # with the params.yaml train writes beside model.pt
    shutil.copytree(model_dir, saved)
    params = checkpoint.load(saved / checkpoint.MODEL_FILE)["params"]
    files.write_text(saved / "params.yaml", yaml.safe_dump(params, sort_keys=False))
    loaded = []
    monkeypatch.setitem(translate_stage.BACKENDS, "torch", lambda *args: loaded.append(args))
    result = run(["--model", str(saved), "--device", "cpu", "--top-k", "5"], b"ein hund\n")
    assert result.exit_code == 1 and "--top-k: applies to sampling only" in result.output
    assert loaded == []  # refused from params.yaml alone, before any weights are read


def test_command_decodes_an_ensemble_as_the_translator_does(model_dir: Path, tmp_path: Path) -> None:
    other = make_model_dir(tmp_path / "other", seed=5)  # the fixture's vocabulary, other weights
    lines = ["ein hund läuft", "", "die katze springt über die straße"]
    result = run(
        ["--model", str(model_dir), "--ensemble", str(other), "--device", "cpu"], "\n".join(lines).encode()
    )
    assert result.exit_code == 0, result.output
    ensemble = Translator.from_dir(model_dir, device="cpu", ensemble=[str(other)])
    assert result.stdout_bytes.decode("utf-8").split("\n")[:-1] == ensemble.translate(lines)
    alone = Translator.from_dir(model_dir, device="cpu").translate(lines)
    assert ensemble.translate(lines) != alone  # the member counts: an ignored --ensemble fails here
    refused = run(["--model", str(model_dir), "--ensemble", str(model_dir), "--device", "cpu"], b"ein hund\n")
    assert (
        refused.exit_code == 1
        and "--ensemble[0]: " in refused.output
        and "is the model itself" in refused.output
    )
    ct2 = run(
        ["--model", str(model_dir), "--ensemble", str(other), "--backend", "ctranslate2"], b"ein hund\n"
    )
    assert ct2.exit_code == 1 and "--ensemble: the ctranslate2 backend decodes one model" in ct2.output


def test_command_length_penalty_reaches_the_search(model_dir: Path, translator: Translator) -> None:
    lines = ["der hund springt über die straße", "ein mann", "die frau läuft"]
    for alpha in (0.0, 2.0):
        result = run(
            ["--model", str(model_dir), "--device", "cpu", "--length-penalty", str(alpha), "--n-best", "3"],
            "\n".join(lines).encode(),
        )
        assert result.exit_code == 0, result.output
        rows = result.stdout_bytes.decode("utf-8").split("\n")[:-1]
        want = translator.translate_nbest(lines, 3, length_penalty=alpha)
        assert rows == [tr.nbest_row(i, t) for i, ts in enumerate(want) for t in ts]


def test_command_no_repeat_ngram_size_reaches_the_search(model_dir: Path, translator: Translator) -> None:
    lines = ["der hund springt über die straße", "ein mann", "die frau läuft"]
    for size in (1, 2):
        result = run(
            ["--model", str(model_dir), "--device", "cpu", "--no-repeat-ngram-size", str(size)],
            "\n".join(lines).encode(),
        )
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == translator.translate(lines, no_repeat_ngram_size=size)
    banned = translator.translate(lines, no_repeat_ngram_size=1)
    assert banned != translator.translate(lines)  # the test model repeats itself: the ban changed something
    refused = run(["--model", str(model_dir), "--no-repeat-ngram-size", "-1"], b"ein hund\n")
    message = "--no-repeat-ngram-size: must be non-negative (0: off)"
    assert refused.exit_code == 1 and message in refused.output
