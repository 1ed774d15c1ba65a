"""bench/noise.py: planted noise is seeded, of the asked shares, disjoint, and of the kind it says."""

from __future__ import annotations

from bench import noise

SRC = [f"Satz {i} auf Deutsch" for i in range(200)]
TGT = [f"sentence {i} in English" for i in range(200)]
OTHERS = [[f"phrase {i} en français" for i in range(200)], [f"věta {i} česky" for i in range(200)]]
SHARES = {"misaligned": 0.1, "wrong_language": 0.05, "untranslated": 0.05, "fragment": 0.05}


def test_each_kind_is_planted_at_its_share_on_disjoint_lines_and_the_rest_untouched():
    noisy, planted = noise.plant(SRC, TGT, OTHERS, SHARES, seed=3)
    assert {k: len(v) for k, v in planted.items()} == {k: round(s * 200) for k, s in SHARES.items()}
    touched = [i for lines in planted.values() for i in lines]
    assert len(touched) == len(set(touched))
    assert all(noisy[i] == TGT[i] for i in range(200) if i not in set(touched))
    assert all(noisy[i] != TGT[i] and noisy[i] in TGT for i in planted["misaligned"])
    assert all(noisy[i] in (OTHERS[0][i], OTHERS[1][i]) for i in planted["wrong_language"])
    assert all(noisy[i] == SRC[i] for i in planted["untranslated"])
    assert all(noisy[i] != TGT[i] for i in planted["fragment"])


def test_the_same_seed_plants_the_same_noise_and_another_seed_other_lines():
    assert noise.plant(SRC, TGT, OTHERS, SHARES, seed=3) == noise.plant(SRC, TGT, OTHERS, SHARES, seed=3)
    assert (
        noise.plant(SRC, TGT, OTHERS, SHARES, seed=4)[1] != noise.plant(SRC, TGT, OTHERS, SHARES, seed=3)[1]
    )


def test_removed_shares_count_each_kind_and_the_clean_pairs_lost():
    noisy, planted = noise.plant(SRC, TGT, OTHERS, SHARES, seed=3)
    drop = set(planted["untranslated"]) | set(planted["misaligned"][:10]) | {i for i in range(5)}
    kept = [(s, t) for i, (s, t) in enumerate(zip(SRC, noisy)) if i not in drop]
    shares = noise.removed_shares(SRC, noisy, planted, [s for s, _ in kept], [t for _, t in kept])
    assert shares["untranslated"] == {"pairs": 10, "removed": 10, "share": 1.0}
    assert shares["misaligned"]["removed"] == 10 and shares["wrong_language"]["removed"] == 0
    planted_lines = {i for lines in planted.values() for i in lines}
    lost = len({i for i in range(5)} - planted_lines)
    assert shares["clean"]["removed"] == lost and shares["clean"]["pairs"] == 200 - len(planted_lines)
