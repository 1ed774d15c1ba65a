"""pipeline/experiments/noise.py and `python -m pipeline noise`: planted noise is seeded, of the asked
shares, disjoint, and of the kind it says; the report compares the runs against (a) and (b)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from pipeline import files
from pipeline.experiments import archive as run_archive
from pipeline.experiments import noise
from pipeline.reporting.hypotheses import RunHypotheses
from pipeline.reporting.runs import RunRecord
from pipeline.reporting.significance import sha256_of
from pipeline.stages import noise as noise_command

SRC = [f"Satz {i} auf Deutsch" for i in range(200)]
TGT = [f"sentence {i} in English" for i in range(200)]
OTHERS = [[f"phrase {i} en français" for i in range(200)], [f"věta {i} česky" for i in range(200)]]
SHARES = {"misaligned": 0.1, "wrong_language": 0.05, "untranslated": 0.05, "fragment": 0.05}


def test_noise_is_added_at_its_share_on_disjoint_lenders_and_every_real_pair_stays():
    src, tgt, planted = noise.plant(SRC, TGT, OTHERS, SHARES, seed=3)
    assert {k: len(v) for k, v in planted.items()} == {k: round(s * 200) for k, s in SHARES.items()}
    added = {i for lines in planted.values() for i in lines}
    assert len(src) == len(tgt) == 200 + len(added) == 200 + sum(len(v) for v in planted.values())
    real = [(s, t) for i, (s, t) in enumerate(zip(src, tgt)) if i not in added]
    assert sorted(real) == sorted(zip(SRC, TGT))  # every real pair, once
    assert real != list(zip(SRC, TGT))  # and the noise among them, not appended
    lenders = [SRC.index(src[i]) for i in added]
    assert len(lenders) == len(set(lenders))  # a real line lends its source once
    assert all(tgt[i] in TGT and tgt[i] != TGT[SRC.index(src[i])] for i in planted["misaligned"])
    assert all(
        tgt[i] in (OTHERS[0][SRC.index(src[i])], OTHERS[1][SRC.index(src[i])])
        for i in planted["wrong_language"]
    )
    assert all(tgt[i] == src[i] for i in planted["untranslated"])
    assert all(tgt[i] not in TGT for i in planted["fragment"])


def test_the_same_seed_plants_the_same_noise_and_another_seed_other_lines():
    assert noise.plant(SRC, TGT, OTHERS, SHARES, seed=3) == noise.plant(SRC, TGT, OTHERS, SHARES, seed=3)
    assert noise.plant(SRC, TGT, OTHERS, SHARES, seed=4) != noise.plant(SRC, TGT, OTHERS, SHARES, seed=3)


def test_removed_shares_count_each_kind_and_the_clean_pairs_lost():
    src, tgt, planted = noise.plant(SRC, TGT, OTHERS, SHARES, seed=3)
    real = [i for i in range(len(src)) if i not in {j for lines in planted.values() for j in lines}]
    drop = set(planted["untranslated"]) | set(planted["misaligned"][:10]) | set(real[:5])
    kept = [(s, t) for i, (s, t) in enumerate(zip(src, tgt)) if i not in drop]
    shares = noise.removed_shares(src, tgt, planted, [s for s, _ in kept], [t for _, t in kept])
    assert shares["untranslated"] == {"pairs": 10, "removed": 10, "share": 1.0}
    assert shares["misaligned"]["removed"] == 10 and shares["wrong_language"]["removed"] == 0
    assert shares["clean"] == {"pairs": 200, "removed": 5, "share": 5 / 200}


def test_the_report_compares_every_run_with_a_and_b_and_says_what_c_recovered(tmp_path):
    refs_dir = tmp_path / "raw"
    (refs_dir / "test").mkdir(parents=True)
    refs = [f"a small dog number {i} runs across the green field" for i in range(40)]
    files.write_lines(refs_dir / "test" / "multi30k-test_2016_flickr.tgt", refs)
    sha = {noise.FLICKR: sha256_of(refs_dir / "test" / "multi30k-test_2016_flickr.tgt")}
    damaged = [" ".join(line.split()[:4]) for line in refs]  # the first four words only
    sources = [f"ein kleiner Hund Nummer {i} rennt über das grüne Feld" for i in range(40)]
    files.write_lines(refs_dir / "test" / "multi30k-test_2016_flickr.src", sources)
    outputs = {
        "clean": refs,
        "noisy-clean-today": [s.upper() + "!" for s in sources[:10]] + damaged[10:],  # 10 copies
        "noisy-web-rules": damaged[:20] + refs[20:],
        "noisy-web-score": refs[:36] + damaged[36:],
    }
    for name, hyps in outputs.items():
        run = run_archive.ArchivedRun(
            RunRecord(name, id=name), hyps=RunHypotheses(name, {noise.FLICKR: hyps}, sha)
        )
        run_archive.save(tmp_path / "noise" / "runs", name, run)
    src, tgt, planted = noise.plant(SRC, TGT, OTHERS, SHARES, seed=3)
    shares = noise.removed_shares(src, tgt, planted, src[:100], tgt[:100])
    files.write_json(tmp_path / "noise" / "removed" / "noisy-web-score.json", shares)
    out = tmp_path / "noise.md"
    result = CliRunner().invoke(
        noise_command.command,
        ["report", "--dir", str(tmp_path / "noise"), "--refs", str(refs_dir), "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    body = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    flickr = body["scores"][noise.FLICKR]
    a, b, c = (
        flickr[noise.RUNS[n]]["bleu"]["score"] for n in ("clean", "noisy-clean-today", "noisy-web-score")
    )
    assert a == 100.0 and b < c < a
    assert body["recovered"][noise.RUNS["noisy-web-score"]] == round((c - b) / (a - b), 3)
    assert flickr[noise.RUNS["noisy-web-score"]]["bleu"]["vs_b"][1] < 0.05  # c is better than b
    assert "vs_b" not in flickr[noise.RUNS["noisy-clean-today"]]["bleu"]  # b is that baseline
    text = out.read_text(encoding="utf-8")
    assert "(c) noisy, + web rules and model score" in text and "(b) lost against (a) recovered" in text
    assert body["removed"]["noisy-web-score"]["untranslated"]["share"] == shares["untranslated"]["share"]
    copies = {name: body["copies"][name][noise.FLICKR] for name in outputs}
    assert copies == {"clean": 0.0, "noisy-clean-today": 0.25, "noisy-web-rules": 0.0, "noisy-web-score": 0.0}
    assert "translations that copy their source" in text and "25.0%" in text


def test_shares_that_add_up_to_more_than_the_real_lines_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CORPUS_MIRROR", str(tmp_path))
    args = ["make", "--out", str(tmp_path / "noise"), "--share", "misaligned", "0.9"]
    result = CliRunner().invoke(noise_command.command, args)
    assert result.exit_code == 1 and "the shares add up to 1.30" in result.output
    assert "a line lends once" in result.output and not (tmp_path / "noise").exists()
