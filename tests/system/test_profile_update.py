"""bench/profile_update.py: it profiles our update and splits its time by kind of work."""

from __future__ import annotations

import re

from click.testing import CliRunner

from bench import profile_update


def test_the_update_profile_says_where_the_time_goes():
    result = CliRunner().invoke(
        profile_update.main, ["--precision", "fp32", "--no-compile", "--updates", "1", "--top", "0"]
    )
    assert result.exit_code == 0, result.output
    shares = dict(re.findall(r"^  (\w[\w ]*?) +[\d.]+ ms +([\d.]+)%$", result.output, re.M))
    assert {"matmul", "optimizer", "dropout masks", "other"} <= shares.keys(), result.output
    assert float(shares["matmul"]) > 20  # the update's products are most of its work in fp32
    assert abs(sum(map(float, shares.values())) - 100) < 0.5
