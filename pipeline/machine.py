"""The machine and software a measurement ran on, for the tables of benchmarks and experiments."""

from __future__ import annotations

import datetime
import importlib
import os
import platform
from collections.abc import Sequence
from pathlib import Path


def machine_info(threads_label: str, threads: int, packages: Sequence[str] = ()) -> dict[str, str]:
    """The machine and software a benchmark ran on, for the report's table: CPU, cores, threads,
    the versions of Python, torch and `packages` (the peers measured), and the date."""
    cpu = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [
            x.split(":", 1)[1].strip() for x in cpuinfo.read_text().splitlines() if x.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    versions = {"python": platform.python_version()}
    for name in ("torch", *packages):
        try:
            versions[name] = importlib.import_module(name).__version__
        except ImportError:
            versions[name] = "not installed"
    return {
        "CPU": cpu,
        "cores (os.cpu_count)": str(os.cpu_count()),
        threads_label: str(threads),
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
