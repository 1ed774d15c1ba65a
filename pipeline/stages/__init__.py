"""One module per command of `python -m pipeline`: the click command and its orchestration only."""
