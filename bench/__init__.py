"""Benchmarks: scripts run by hand (`python -m bench.<name>`), not tests; results go to reports/."""
