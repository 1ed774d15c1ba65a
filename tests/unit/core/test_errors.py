"""pipeline/errors.py: what a user's mistake looks like: one line with the fix, no traceback."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from pipeline.errors import ParamsError, UserError


@pytest.mark.parametrize(("error", "code"), [(UserError, 1), (ParamsError, 2)])
def test_a_user_error_is_one_line_with_its_exit_code(error: type[UserError], code: int) -> None:
    @click.command()
    def command() -> None:
        raise error("experiments/grid.yaml: lr: expected value labels")

    result = CliRunner().invoke(command)
    assert result.exit_code == code
    assert result.output == "Error: experiments/grid.yaml: lr: expected value labels\n"
