"""pipeline/cli.py: each command's module is imported when the command is asked for, so a user error
that module meets at import (a recipe file of the wrong shape) is one line, not a traceback."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.errors import UserError
from pipeline.experiments import recipes


def test_a_commands_module_that_meets_a_user_error_at_import_says_it_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def bad(*_: object) -> None:
        raise UserError("experiments/grid.yaml: dropout: expected value labels")

    monkeypatch.setattr(recipes, "load_grid", bad)
    for name in ("pipeline.stages.recipes", "pipeline.experiments.pairs"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # imported afresh, meeting the bad file
    result = CliRunner().invoke(cli, ["recipes", "queue", "--help"])
    assert result.exit_code == 1
    assert result.output == "Error: experiments/grid.yaml: dropout: expected value labels\n"
    assert CliRunner().invoke(cli, ["train", "--help"]).exit_code == 0  # the other commands stay
