#!/usr/bin/env bash
# The GPU check in one command: the CUDA tests, then the benchmarks on the GPU (bench/README.md):
#   bash bench/gpu_check.sh                          # on one GPU: reports/gpu-tests.xml, gpu.json, gpu.md
#   bash bench/gpu_check.sh --dry-run --out /tmp/g   # the CPU rehearsal: smoke sizes, writes only under --out
# PYTHON picks the interpreter; else the repository's .venv, else python3 (a GPU image's torch).
# Each step has a time limit (under 10 minutes in all); the exit code is 1 when a step failed (named at
# the end), 2 for a bad call. A relative --out is taken from where the script is called.
set -uo pipefail
called_from=$PWD
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONUNBUFFERED=1

dry=0
out=reports
while (($#)); do
    case "$1" in
        --dry-run) dry=1 ;;
        --out)
            if (($# < 2)); then echo "gpu_check: --out needs a folder" >&2; exit 2; fi
            out=$2; [[ $out == /* ]] || out=$called_from/$out; shift ;;
        *) echo "gpu_check: unknown argument '$1' (the options are --dry-run and --out DIR)" >&2; exit 2 ;;
    esac
    shift
done

if ((dry)); then
    if [[ "$(realpath -m "$out")/" == "$(realpath -m reports)"/* ]]; then
        echo "gpu_check: --dry-run writes only where --out says, and never to reports/: give --out DIR" >&2
        exit 2
    fi
    device=cpu
    sizes=(--smoke)
else
    if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
        echo "gpu_check: no CUDA GPU here (torch.cuda.is_available() is False), and this check needs one." \
            "Run it on a GPU machine, or rehearse it on the CPU with: bash bench/gpu_check.sh --dry-run --out DIR" >&2
        exit 2
    fi
    device=cuda
    sizes=(--precisions bf16 --shape 256x32 --seconds 8 --repeats 2)  # and compiled: three compilations
fi
mkdir -p "$out"
rm -f "$out"/gpu-tests.xml "$out"/gpu.json "$out"/gpu.md "$out"/gpu_serve_detail.json  # no older figures left

failed=()
step() {  # step NAME SECONDS COMMAND...: run it within its time limit, say how long it took
    local name=$1 limit=$2 began=$SECONDS
    shift 2
    echo "[gpu_check] $name: $*"
    # SIGINT first, so that Python unwinds (the served model's server stops); KILL 30 s later
    if ! timeout -s INT -k 30 "$limit" "$@"; then failed+=("$name"); fi
    echo "[gpu_check] $name: done in $((SECONDS - began)) s"
}

step tests 200 "$PYTHON" -m pytest tests/gpu -v -p no:cacheprovider -o junit_family=xunit1 \
    --junitxml "$out/gpu-tests.xml"
step train 180 "$PYTHON" -m bench.train_speed --device "$device" "${sizes[@]}" \
    --out-json "$out/gpu.json" --out-md "$out/gpu.md"

# The trained model on its first test set when the pipeline has made them, else random weights.
first=$("$PYTHON" -c 'from pipeline import params as P; print(([*P.load("params.yaml").data.test] or [""])[0])')
test_src=data/clean/test/$first.src
model=()
if ((!dry)) && [[ -f data/model/model.pt && -f $test_src ]]; then model=(--model data/model --split-file "$test_src"); fi
if ((dry)); then decode_sizes=(--smoke); else decode_sizes=(); fi
step decode 90 "$PYTHON" -m bench.decode_speed --device "$device" "${decode_sizes[@]}" "${model[@]}" \
    --out "$out/gpu.json" --md "$out/gpu.md"
if ((${#model[@]})); then
    step serve 100 "$PYTHON" -m bench.serve_load "${model[@]}" --clients 8 --requests 8 --lines 8 --loads 2 \
        --out "$out/gpu.json" --md "$out/gpu.md"
else
    echo "[gpu_check] serve: skipped (no data/model and $test_src: run the pipeline first)"
fi

if ((${#failed[@]})); then
    echo "[gpu_check] FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "[gpu_check] every step passed: $out/gpu-tests.xml, $out/gpu.json, $out/gpu.md"
