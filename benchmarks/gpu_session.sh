#!/usr/bin/env bash
# The GPU measurements of the open issues (13: fused cells, 14: solvers, 15's training speed) as steps that fit the
# device tool's commands (10 minutes each, one machine per session, 30 minutes of device time in all), run from the
# repository root on a machine with its own torch, Triton, JAX and diffrax and no network:
#
#   bash benchmarks/gpu_session.sh wheels          # HERE, once: the anchors the GPU image lacks, into .whl/
#   bash benchmarks/gpu_session.sh tests            # THERE, one command per step (carry .whl)
#   bash benchmarks/gpu_session.sh cells            #   ... solvers, enso, fit
#
# Steps, in the order of the issues' needs, with their time caps (about 27 minutes in all, within the 30 of a
# session if the calls follow each other while the machine is warm): tests (pytest -m gpu, 5 min), cells
# (benchmarks/cell_speed.py on CUDA: every preset's fused engine at the issue's three sizes, then LEM's generic
# engine and the hand-written loop, LEM/coRNN/τ-GRU with TF32 products, 8 min), solvers (benchmarks/solvers.py at batches 1280, 16384 and 131072 against
# diffrax on the GPU, 6 min), enso (ENSO with 131072 trajectories against torchdde, 4 min), fit (odelab fit fhn: the
# paper preset's 400 epochs timed, the quick preset's test RMSE with either engine, 5 min). Each writes its JSON and
# log into $OUT (the device tool's folder) or benchmarks/results/gpu/, the benchmarks after every size or batch
# too, so a step cut at its cap keeps what it measured; a step that fails does not stop the next one. SMOKE=1 runs
# every step on the CPU at toy sizes (a check of the commands, no figures).
set -u
cd "$(dirname "$0")/.."
RESULTS=${OUT:-benchmarks/results/gpu}
mkdir -p "$RESULTS"
PY=${PYTHON:-python3}
SMOKE=${SMOKE:-0}
DEVICE=cuda
[ "$SMOKE" = 1 ] && DEVICE=cpu

setup() {
    # the anchors the image lacks (torchdde, torchode and their pure-Python needs), odelab from the working tree
    if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/odelab-site \
            .whl/*.whl || echo "setup: the carried wheels did not install"
        export PYTHONPATH=/tmp/odelab-site${PYTHONPATH:+:$PYTHONPATH}
    fi
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    export ODELAB_CACHE=${ODELAB_CACHE:-$PWD/.odelab_cache}
    $PY - <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")
try:
    import triton
    print("triton", triton.__version__)
except ImportError:
    print("triton: not installed")
EOF
}

step() {  # step NAME SECONDS COMMAND...: run with a time limit, output to the log and the terminal
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s): $*"
    local start=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee -a "$RESULTS/gpu_session.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$RESULTS/gpu_session.log"
}

wheels() {
    mkdir -p .whl
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \
        torchdde==0.1.3 torchode==1.0.1 torchtyping==0.1.5 "typeguard<3"
    ls .whl
}

tests() {
    if [ "$SMOKE" = 1 ]; then
        step tests 300 $PY -m pytest -q -p no:cacheprovider tests/solvers/test_host_reads.py
    else
        step tests 300 $PY -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests
    fi
}

cells() {
    local sizes=32x1000x16,128x1000x128,1024x1000x256 repeats=5
    [ "$SMOKE" = 1 ] && sizes=4x20x8 repeats=2
    step cells-fused 300 $PY benchmarks/cell_speed.py --device "$DEVICE" --engines fused --sizes "$sizes" \
        --repeats "$repeats" --out "$RESULTS/cell_speed_$DEVICE.json"
    step cells-generic 100 $PY benchmarks/cell_speed.py --device "$DEVICE" --models lem,lem-handwritten \
        --engines generic --sizes "$sizes" --repeats 3 --out "$RESULTS/cell_speed_${DEVICE}_generic.json"
    step cells-tf32 90 $PY benchmarks/cell_speed.py --device "$DEVICE" --models lem,cornn,taugru --engines fused \
        --tf32 --sizes "$sizes" --repeats 3 --no-forward --out "$RESULTS/cell_speed_${DEVICE}_tf32.json"
}

solvers() {
    if [ "$SMOKE" = 1 ]; then
        step solvers 300 $PY benchmarks/solvers.py --quick --repeats 1 --no-compile --no-large-state \
            --out "$RESULTS/solvers_$DEVICE.json"
    else
        step solvers 360 $PY benchmarks/solvers.py --device cuda --batches 1280 16384 131072 --repeats 5 \
            --large-repeats 3 --out "$RESULTS/solvers_cuda.json"
    fi
}

enso() {
    if [ "$SMOKE" = 1 ]; then
        step enso 300 $PY benchmarks/enso_torchdde.py --batch 8 --horizon 20 --repeats 1 --torchdde-repeats 1 \
            --reference-subset 4 --out "$RESULTS/enso_$DEVICE.json"
    else
        step enso 240 $PY benchmarks/enso_torchdde.py --device cuda --batch 131072 --reference-subset 256 \
            --repeats 2 --torchdde-repeats 1 --out "$RESULTS/enso_cuda.json"
    fi
}

fit() {
    local epochs=() preset=paper
    [ "$SMOKE" = 1 ] && epochs=(--epochs 2) preset=quick
    local runs=${TMPDIR:-/tmp}/odelab-gpu-runs
    step fit-paper 150 $PY -m odelab fit fhn --model lem --preset "$preset" "${epochs[@]}" --device "$DEVICE" \
        --no-progress --out "$runs/paper"
    for engine in fused generic; do
        step "fit-quick-$engine" 75 $PY -m odelab fit fhn --model lem --preset quick "${epochs[@]}" \
            --device "$DEVICE" --engine "$engine" --no-progress --out "$runs/quick-$engine"
    done
    $PY - "$runs" "$RESULTS/fit_$DEVICE.json" <<'EOF'
import json, sys
from pathlib import Path
runs, out = Path(sys.argv[1]), Path(sys.argv[2])
summary = {}
for name in ("paper", "quick-fused", "quick-generic"):
    path = runs / name / "results.json"
    summary[name] = json.loads(path.read_text()) if path.exists() else None
out.write_text(json.dumps(summary, indent=2, default=str))
print("written", out)
EOF
}

[ $# -gt 0 ] || { sed -n '2,19p' "$0"; exit 2; }
for name in "$@"; do
    case "$name" in
        wheels) wheels ;;
        tests|cells|solvers|enso|fit) [ -n "${SETUP_DONE:-}" ] || { setup; SETUP_DONE=1; }; "$name" ;;
        *) echo "unknown step: $name (wheels, tests, cells, solvers, enso, fit)"; exit 2 ;;
    esac
done
