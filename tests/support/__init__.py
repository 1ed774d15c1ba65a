"""What several test modules share, one module per concern (see each module's docstring)."""
