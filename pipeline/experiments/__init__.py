"""Experiments: recipes as data (experiments/), queued through DVC, and their tables with paired tests."""
