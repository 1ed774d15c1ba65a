#!/usr/bin/env bash
# The GPU check in one command (bench/gpu_check.py says what it runs; bench/README.md how):
#   bash bench/gpu_check.sh                          # on one GPU: reports/gpu.json, reports/bench.md
#   bash bench/gpu_check.sh --dry-run --out /tmp/g   # the CPU rehearsal, tiny sizes
# PYTHON picks the interpreter; else the repository's .venv, else python3 (a GPU image's torch).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONUNBUFFERED=1
exec "$PYTHON" -m bench.gpu_check "$@"
