#!/usr/bin/env bash
# The GPU measurements of the open issues (13: fused cells, 14: solvers, 15's training speed) as steps sized for the
# device tool's lease (15 minutes of device time in all, start included; 10 minutes a command), run from the
# repository root on a machine with its own torch, Triton, JAX and diffrax and no network:
#
#   bash benchmarks/gpu_session.sh wheels             # HERE, once: the packages the GPU image lacks into .whl/,
#                                                     #   the solvers' scipy references into benchmarks/results/
#   bash benchmarks/gpu_session.sh tests cells barrier trace liquidrows
#                                                     # THERE (carry .whl; timeout_s 600): the gpu tests, every
#                                                     #   cell under the default schedule, then what no lease has
#                                                     #   measured yet (the grid barrier's cost a phase; the grid
#                                                     #   kernels' variants: LEM's one-barrier forward, stored
#                                                     #   gates, 4 warps; the liquid cells' stored
#                                                     #   conductances and row slabs; LEM's kernels under BF16 and TF32
#                                                     #   products; the liquid cells' rows a program); about 5
#                                                     #   minutes (2026-12-04: tests 104 s, cells 42 s, trace 14 s),
#                                                     #   a cut drops the last; 8 files, the most a call returns
#   bash benchmarks/gpu_session.sh captured profile tf32 fit
#                                                     # a second command if the lease has 4 minutes left: the
#                                                     #   steps replayed from CUDA graphs, where LEM's and
#                                                     #   UnICORNN's kernels stall (Nsight Compute), TF32
#                                                     #   products under the grid schedule, the FHN paper fit (then
#                                                     #   quickfit, irregular, dropout, bf16)
# 2026-12-04's lease ran tests cells liquid fit irregular dropout (479 s), then trace, tf32x3, bf16 and generic.
# Since then the kernels read their weight tiles without shared-memory bank conflicts (benchmarks/shared_banks.py:
# LEM's grid forward 5.7x fewer wavefronts a step in sm_90 PTX): the next `cells` run is the first to measure it,
# `barrier` times the two layouts' products apart (grid_barrier.py: products, products-conflicted) and traces the
# opt-in variants added since (ODELAB_GRID_GATES=stored, ODELAB_GRID_WARPS=4; LEM's one-barrier forward; the liquid
# cells' ODELAB_LIQUID_LAYOUT=rows, one barrier a sub-step among a slab's programs);
# `captured` times the steps replayed from CUDA graphs. Where a variant is faster, make it the default.
# Steps and their time caps:
#   tests      pytest -m gpu over 10 processes (pytest-xdist; 225 tests, 104 s on 2026-12-04's lease), 170 s, then
#              the unmarked CUDA tests of test_cuda_kernels.py (tanh, UnICORNN's trips), 60 s; meanwhile one short
#              run of every cell size compiles the benchmark's kernels into Triton's cache. A later irregular or
#              dropout step of the same command then skips the tests these ran (irregular keeps the liquid cells',
#              which they leave to the liquid steps)
#   grid       the grid-synchronised schedule: its gpu tests (a process per preset), then LEM stepwise / grid and
#              nn.LSTM at the three sizes, 100 + 70 s
#              (every CUDA row of cell_speed.py since 2026-12-07 also times 3 steps issued back to back, as a
#              training loop issues them: fwd_bwd_back_to_back_*; the runs of one repeat and the warm-up skip it)
#   cells      benchmarks/cell_speed.py on CUDA: the fused engine of every preset but the liquid cells (under
#              the stepwise and the grid schedules), against nn.LSTM, nn.GRU and FlashRNN's LSTM, at the issue's three sizes
#              (SIZES=B×T×H,... narrows), 160 s
#   liquid     the liquid cells (LTC, STC, LRCU-A/S) over synapse tiles, the CUDA default from hidden 17 since
#              2026-11-27 (the batch-block kernels before took 0.39-2.2 s a step at hidden 128): their gpu tests, 60 s,
#              then the grid and stepwise schedules against nn.LSTM at the three sizes, one repeat (108 s on 2026-12-04, before each timed step had an untimed one), 180 s
#   irregular  per-sample steps in the Triton kernels (new 2026-12-01, first run 2026-12-04): the gpu tests of
#              test_cuda_gaps.py and of the gaps' gradient (test_cuda_gap_grads*.py, every schedule since
#              2026-12-02), 120 s, then benchmarks/irregular.py for LEM, coRNN, GRU-ODE, LRCU-A and LTC with the gaps,
#              with gaps requiring grad (default schedule; LEM, coRNN, GRU-ODE also the persistent one they ran
#              before), on a regular grid and cuDNN's LSTM reading the gap, at (32, 1000, 16) and (128, 1000, 128),
#              60 and 120 s (the JSON written after every model)
#   dropout    state dropout inside the τ-GRU and Delay GRU kernels (new 2026-12-01, first run 2026-12-04):
#              test_cuda_dropout.py's gpu tests, 60 s, then the IMDB preset's training step (τ = 1 step, p = 0.04) at
#              its size (64, 256, 128) on the kernels and on the generic loop, against cuDNN's LSTM, 90 s
#   liquidrows LTC, STC and LRCU-A under their one-launch kernels with ODELAB_LIQUID_ROWS=2 and 1 batch rows a
#              program (2: one warp, a thread per (row, neuron); LIQUID_ROWS="1 2 4 8" for more), at (32, 1000, 16),
#              60 s each
#   barrier    benchmarks/grid_barrier.py: µs a grid phase of the barrier alone, with the state's exchange, the
#              loads alone and LEM's forward, over 2 … 16 column programs a batch block, 60 s; then the training
#              step of LEM, coRNN and τ-GRU under each opt-in variant of the weights-on-chip grid kernels (LEM's one
#              barrier a step, ODELAB_GRID_GATES=stored, ODELAB_GRID_WARPS=4, both) at hidden 128, each kernel's time
#              apart (kernel_trace.py --grid), 120 s (the tests step's warm-up compiles the variants' kernels);
#              then LEM and τ-GRU at (1024, 1000, 256), their weights streamed, with and without stored gates, 60 s;
#              then LTC and LRCU-A at (128, 1000, 128): synapse tiles or row slabs (ODELAB_LIQUID_LAYOUT), their
#              conductances stored or not, 60 s
#   fit        odelab fit fhn --preset paper, its 400 epochs timed, 60 s
#   solvers    benchmarks/solvers.py at batches 1280, 16384 and 131072 against diffrax on the GPU, 115 s
#   enso       ENSO with 131072 trajectories, eager and compile=True (24 steps per inductor call; the eager loop is
#              the torch path on CUDA: 1.2-1.6 s on the 2026-11-26 lease), torchdde on 1024 of them, 150 s
#   tf32       LEM, coRNN and τ-GRU with TF32 products, 40 s
#   tf32x3     float32 products as three TF32 products (ODELAB_FLOAT32_PRODUCTS=tf32x3, opt-in until measured): its
#              gpu tests (the IEEE float32 criterion at T = 1000), 60 s; LEM, coRNN, τ-GRU and GRU-ODE, 70 s
#   bf16       float32 products of bfloat16-rounded operands (ODELAB_FLOAT32_PRODUCTS=bf16, opt-in until measured): its
#              gpu tests (BF16_TOL at T = 1000), 60 s; LEM, coRNN, τ-GRU and GRU-ODE, 70 s
#   trace      benchmarks/kernel_trace.py: every kernel's device time in a training step against the step's wall
#              time (2026-12-04: UnICORNN at (32, 1000, 16) 0.81 ms a step, its kernels 0.18 ms), UnICORNN, LEM, LTC,
#              LRCU-A and nn.LSTM at the two smaller sizes, 90 s; then LEM and coRNN at hidden 128 with BF16 and with
#              TF32 products (their grid kernels' forward and backward apart; one JSON), 60 s
#   generic    LEM's generic engine and the hand-written loop, 60 s
#   captured   the training step replayed from a CUDA graph (cell_speed.py --captured): UnICORNN, LEM, coRNN,
#              GRU-ODE, τ-GRU, LTC, LRCU-A and cuDNN's LSTM captured alike at (32, 1000, 16) and (128, 1000, 128),
#              where a step's host side (Python, autograd, launches) weighs most, 90 s
#   quickfit   the quick FHN preset's test RMSE with either engine, 2 × 90 s (the generic engine takes about a
#              second a training step on the GPU: FIT_EPOCHS=10 fits both in a lease)
#   profile    Nsight Compute on LEM's grid kernels at hidden 128 (100 s) and UnICORNN's at hidden 16 (60 s)
#   coldstart  the solvers' first call from empty Triton and odelab caches (batch 1280) against diffrax's jit, with
#              where it goes (each kernel's compilation, each C compiler run), 70 s; then a new configuration
#              (batch 16384) in a new process with the caches the first filled, 60 s
# A lease holds about two commands (2026-11-25: tests cells fit solvers enso tf32 took 500 s; cells stopped after
# its first size, enso at its then 50 s cap). Each step writes its JSON and log into $OUT (the device tool's
# folder) or benchmarks/results/gpu/, the benchmarks after every size or batch too, so a step cut at its cap keeps
# what it measured; a step that fails does not stop the next one. SMOKE=1 runs every step on the CPU at toy sizes
# (a check of the commands, no figures). `python benchmarks/gpu_tables.py FOLDER --readme README.md` writes the
# README's GPU section from a folder of results.
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
        torchdde==0.1.3 torchode==1.0.1 torchtyping==0.1.5 "typeguard<3" flashrnn==1.0.8
    ls .whl
    $PY benchmarks/solvers.py --references --batches 1280 16384 131072  # cached in benchmarks/results/
}

tests() {
    if [ "$SMOKE" = 1 ]; then
        step tests 300 $PY -m pytest -q -p no:cacheprovider tests/solvers/test_host_reads.py
    else
        local parallel=()
        $PY -c "import xdist" 2>/dev/null && parallel=(-n 10)
        warm &  # the benchmarks' kernels compiled meanwhile, into Triton's on-disk cache
        local skip="not tf32x3 and not bf16 and not liquid"  # the tf32x3, bf16 and liquid steps run those
        [ -n "${GRID_TESTED:-}" ] && skip="$skip and not grid and not one_barrier"  # the grid step ran them
        step tests 170 $PY -m pytest -m gpu -v -p no:cacheprovider -o addopts="" "${parallel[@]}" -k "$skip" tests
        # unmarked tests that run on the GPU where one is present: the float32 tanh (FMA contraction and
        # div.full there) and UnICORNN's eight-step trips against the generic loop
        # (49 tests; one process ran 22 of them in 45 s on 2026-12-04, each compiling its kernels)
        step tests-kernels 60 $PY -m pytest -q -p no:cacheprovider -o addopts="" "${parallel[@]}" \
            tests/kernels/test_cuda_kernels.py -k "kernel_tanh or unicornn"
        wait
        GPU_TESTED=1  # the irregular and dropout steps' tests ran here
    fi
}

warm() {  # one short run of each benchmark size, in parallel: the later timed runs find their kernels compiled
    local spec
    for spec in ${SIZES//,/ }; do
        timeout 130 $PY benchmarks/cell_speed.py --device "$DEVICE" --models "$CELLS" --engines fused --sizes "$spec" \
            --repeats 1 --no-forward --back-to-back 0 --out "/tmp/warm_$spec.json" >/dev/null 2>&1 &
        timeout 130 $PY benchmarks/cell_speed.py --device "$DEVICE" --models lem,cornn,taugru --engines fused --tf32 \
            --sizes "$spec" --repeats 1 --no-forward --back-to-back 0 --out "/tmp/warm_tf32_$spec.json" >/dev/null 2>&1 &
    done
    local variant  # the opt-in grid kernels, which the barrier step traces (ODELAB_LEM_GRID, _GRID_GATES, _GRID_WARPS)
    for variant in one-barrier,, ,stored, ,,4 ,stored,4; do
        IFS=, read -r lem gates warps <<< "$variant"
        ODELAB_LEM_GRID=$lem ODELAB_GRID_GATES=$gates ODELAB_GRID_WARPS=$warps timeout 130 $PY benchmarks/cell_speed.py \
            --device "$DEVICE" --models lem,cornn,taugru --engines fused --sizes "${LEM_GRID_SIZES:-128x1000x128}" \
            --repeats 1 --no-forward --back-to-back 0 --out "/tmp/warm_grid_${lem}_${gates}_$warps.json" >/dev/null 2>&1 &
    done
    ODELAB_GRID_GATES=stored timeout 130 $PY benchmarks/cell_speed.py --device "$DEVICE" --models lem,taugru \
        --engines fused --sizes "${STREAMED_SIZES:-1024x1000x256}" --repeats 1 --no-forward --back-to-back 0 \
        --out /tmp/warm_streamed.json >/dev/null 2>&1 &
    for variant in tiles, tiles,stored rows, rows,stored; do  # the liquid cells' layouts, conductances stored or not
        IFS=, read -r layout gates <<< "$variant"
        ODELAB_LIQUID_LAYOUT=$layout ODELAB_GRID_GATES=$gates timeout 130 $PY benchmarks/cell_speed.py \
            --device "$DEVICE" --models ltc,lrcu-a --engines fused --sizes "${LEM_GRID_SIZES:-128x1000x128}" \
            --repeats 1 --no-forward --back-to-back 0 --out "/tmp/warm_liquid_${layout}_$gates.json" >/dev/null 2>&1 &
    done
    wait
    echo "== warm: done after $SECONDS s of the session" | tee -a "$RESULTS/gpu_session.log"
}

SIZES=${SIZES:-32x1000x16,128x1000x128,1024x1000x256}
[ "$SMOKE" = 1 ] && SIZES=4x20x8 && LEM_GRID_SIZES=4x20x8 && CAPTURED_SIZES=4x20x8 && STREAMED_SIZES=4x20x8
# CELLS=... narrows the presets; flashrnn: FlashRNN's LSTM (carried as a wheel), the issue's second anchor
# (NAME: the CUDA default, the grid-synchronised schedule from hidden 33 since 2026-11-26's seventh session;
# NAME-stepwise: the stepwise schedule, the default before; NAME-persistent, the one-launch kernels)
ALL_CELLS=lem,lem-stepwise,cornn,cornn-stepwise,oscillator,oscillator-stepwise,gru-ode,gru-ode-stepwise
ALL_CELLS=$ALL_CELLS,taugru,taugru-stepwise,delaygru,delaygru-stepwise,cornn-implicit,unicornn,unicornn-reversible
CELLS=${CELLS:-$ALL_CELLS,lstm,lstm-ieee,gru,flashrnn}
CAPTURED_CELLS=${CAPTURED_CELLS:-unicornn,unicornn-reversible,lem,cornn,gru-ode,taugru,ltc,lrcu-a,lstm,lstm-ieee}
# the liquid cells: their own step, one repeat (NAME: the CUDA default, synapse tiles from hidden 17 under the
# grid schedule; NAME-stepwise: the same tiles a launch per phase)
LIQUID_CELLS=${LIQUID_CELLS:-ltc,ltc-stepwise,lrcu-a,lrcu-a-stepwise,lrcu-s,stc,lstm,lstm-ieee}
ROWS_SIZES=32x1000x16  # ODELAB_LIQUID_ROWS reaches the defaults up to hidden 16 (above: the batch-block kernels)
[ "$SMOKE" = 1 ] && ROWS_SIZES=4x20x8

cells() {
    step cells 160 $PY benchmarks/cell_speed.py --device "$DEVICE" --models "$CELLS" --engines fused --sizes "$SIZES" \
        --repeats 3 --out "$RESULTS/cell_speed_$DEVICE.json"
}

grid() {  # the grid-synchronised schedule (the CUDA default): its gpu tests, then LEM under it and under the
    # stepwise schedule, and cuDNN's LSTM, at the issue's three sizes (the other cells: `cells`)
    local parallel=()
    $PY -c "import xdist" 2>/dev/null && parallel=(-n 10)
    step gridtest 100 $PY -m pytest -m gpu -v -p no:cacheprovider -o addopts="" "${parallel[@]}" \
        tests/kernels/test_cuda_kernels.py -k "grid or one_barrier"
    GRID_TESTED=1  # a later `tests` step leaves these out
    step grid 70 $PY benchmarks/cell_speed.py --device "$DEVICE" --models lem,lem-stepwise,lstm,lstm-ieee --engines fused \
        --sizes "$SIZES" --repeats 3 --out "$RESULTS/cell_speed_${DEVICE}_grid.json"
}

liquid() {  # the liquid cells over synapse tiles: their gpu tests, then their speed at the issue's three sizes
    step liquidtest 60 $PY -m pytest -m gpu -v -p no:cacheprovider -o addopts="" \
        tests/kernels/test_cuda_kernels.py -k "liquid"
    step liquid 180 $PY benchmarks/cell_speed.py --device "$DEVICE" --models "$LIQUID_CELLS" --engines fused \
        --sizes "$SIZES" --repeats 1 --no-forward --back-to-back 0 --out "$RESULTS/cell_speed_${DEVICE}_liquid.json"
}

irregular() {  # per-sample steps (irregular sampling) in the Triton kernels, new 2026-12-01: their gpu tests, then
    # each cell with the gaps against itself on a regular grid and cuDNN's LSTM reading the gap, at the fhn-irregular
    # size (32, 1000, 16) and at (128, 1000, 128)
    local files=(tests/kernels/test_cuda_gaps.py tests/kernels/test_cuda_gap_grads.py
                 tests/kernels/test_cuda_gap_grads_oscillators.py tests/kernels/test_cuda_gap_grads_*_schedules.py)
    [ -n "${GPU_TESTED:-}" ] && files=()  # the tests step ran them (all but the liquid cells')
    step irregulartest $((${#files[@]} ? 120 : 60)) $PY -m pytest -m gpu -v -p no:cacheprovider -o addopts="" \
        "${files[@]}" tests/kernels/test_cuda_gap_grads_liquid.py
    local shape
    for shape in "32 1000 16" "128 1000 128"; do
        set -- $shape
        [ "$SMOKE" = 1 ] && set -- 2 8 4
        step "irregular-$3" $((60 * ($3 > 16 ? 2 : 1))) $PY benchmarks/irregular.py --device "$DEVICE" --models lem,cornn,gru-ode,lrcu-a,ltc \
            --batch "$1" --steps "$2" --hidden "$3" --repeats 3 --no-generic --out "$RESULTS/irregular_${DEVICE}_$3.json"
    done
}

dropout() {  # state dropout (the τ-GRU paper's IMDB preset) inside the Triton delay-cell kernels: their gpu tests,
    # then the training step at the IMDB size on the kernels and on the generic loop, and τ-GRU without dropout
    [ -n "${GPU_TESTED:-}" ] || step dropouttest 60 $PY -m pytest -m gpu -v -p no:cacheprovider -o addopts="" tests/kernels/test_cuda_dropout.py
    local sizes=64x256x128
    [ "$SMOKE" = 1 ] && sizes=4x20x8
    step dropout 90 $PY benchmarks/cell_speed.py --device "$DEVICE" --models taugru-dropout,delaygru-dropout,taugru,lstm \
        --sizes "$sizes" --repeats 3 --out "$RESULTS/dropout_$DEVICE.json"
}

liquidrows() {  # the liquid one-launch kernels with fewer batch rows a program (ODELAB_LIQUID_ROWS; 16, the
    # default, leaves 2 programs at batch 32 and 8 at 128), one repeat each
    local rows
    for rows in ${LIQUID_ROWS:-2 1}; do
        step "liquidrows$rows" 60 env ODELAB_LIQUID_ROWS="$rows" $PY benchmarks/cell_speed.py --device "$DEVICE" \
            --models ltc-persistent,stc-persistent,lrcu-a-persistent,lstm --engines fused --sizes "$ROWS_SIZES" \
            --repeats 1 --no-forward --back-to-back 0 \
            --out "$RESULTS/cell_speed_${DEVICE}_liquid_rows$rows.json"
    done
}

barrier() {  # where a grid phase's time goes: the barrier alone, with the state exchange, the loads alone, LEM
    local smoke=()
    [ "$SMOKE" = 1 ] && smoke=(--smoke)
    step barrier 60 $PY benchmarks/grid_barrier.py "${smoke[@]}" --out "$RESULTS/grid_barrier_$DEVICE.json"
    # the training step under each opt-in variant of the weights-on-chip grid kernels: LEM's forward with one
    # barrier a step; the forwards' pre-activations stored, so that the backwards compute only the adjoints'
    # products (LEM four a step instead of eight); 4 warps a program instead of 8 (fewer shared-memory wavefronts a
    # multiprocessor in sm_90 PTX); both -- each kernel's time apart, against nn.LSTM
    step gridvariants 120 $PY benchmarks/kernel_trace.py --device "$DEVICE" --sizes "${LEM_GRID_SIZES:-128x1000x128}" \
        --steps 5 --models lem,cornn,taugru,lstm --grid default,one-barrier,stored,4-warps,stored-4-warps \
        --out "$RESULTS/kernel_trace_${DEVICE}_grid_variants.json"
    # LEM and τ-GRU where their weights stream through the step kernels (hidden 256): stored gates there too
    step gridstreamed 60 $PY benchmarks/kernel_trace.py --device "$DEVICE" --sizes "${STREAMED_SIZES:-1024x1000x256}" \
        --steps 3 --models lem,taugru --grid default,stored --out "$RESULTS/kernel_trace_${DEVICE}_grid_variants.json" \
        --append
    # LTC and LRCU-A: the synapse tiles with their conductances stored (the backward's openings once a sub-step),
    # and the row slabs (one barrier a sub-step, a slab's programs alone), with and without
    step gridliquid 60 $PY benchmarks/kernel_trace.py --device "$DEVICE" --sizes "${LEM_GRID_SIZES:-128x1000x128}" \
        --steps 3 --models ltc,lrcu-a --grid default,stored,rows,rows-stored \
        --out "$RESULTS/kernel_trace_${DEVICE}_grid_variants.json" --append
}

captured() {  # the training step replayed from a CUDA graph, odelab's kernels and cuDNN's LSTM alike
    step captured 90 $PY benchmarks/cell_speed.py --device "$DEVICE" --models "$CAPTURED_CELLS" --engines fused \
        --sizes "${CAPTURED_SIZES:-32x1000x16,128x1000x128}" --repeats 3 --no-forward --captured \
        --out "$RESULTS/cell_speed_${DEVICE}_captured.json"
}

tf32() {
    step tf32 40 $PY benchmarks/cell_speed.py --device "$DEVICE" --models lem,cornn,taugru --engines fused \
        --tf32 --sizes "$SIZES" --repeats 3 --no-forward --out "$RESULTS/cell_speed_${DEVICE}_tf32.json"
}

products() {  # products NAME SMOKE_TESTS: ODELAB_FLOAT32_PRODUCTS=NAME (opt-in): its gpu tests, then the speed
    local name=$1 smoke_tests=$2
    if [ "$SMOKE" = 1 ]; then
        step "$name-tests" 120 env ODELAB_FLOAT32_PRODUCTS="$name" $PY -m pytest -q -p no:cacheprovider \
            tests/kernels/test_cuda_kernels.py -k "$smoke_tests"
    else
        local parallel=()
        $PY -c "import xdist" 2>/dev/null && parallel=(-n 10)
        step "$name-tests" 60 $PY -m pytest -m gpu -q -p no:cacheprovider -o addopts="" "${parallel[@]}" \
            tests/kernels/test_cuda_kernels.py -k "$name"
    fi
    step "$name" 70 env ODELAB_FLOAT32_PRODUCTS="$name" $PY benchmarks/cell_speed.py --device "$DEVICE" \
        --models lem,cornn,taugru,gru-ode --engines fused --sizes "$SIZES" --repeats 3 --no-forward \
        --out "$RESULTS/cell_speed_${DEVICE}_$name.json"
}

tf32x3() {  # float32 products as three TF32 products (opt-in): the float32 criterion on the GPU, then the speed
    products tf32x3 "tf32x3_keeps and lem"
}

bf16() {  # float32 products of bfloat16-rounded operands (opt-in): the option's tolerance on the GPU, then the speed
    products bf16 "bf16_tolerance and lem"
}

trace() {  # each kernel's device time in a training step against the step's wall time (torch.profiler)
    local sizes=32x1000x16,128x1000x128
    [ "$SMOKE" = 1 ] && sizes=4x20x8
    step trace 90 $PY benchmarks/kernel_trace.py --device "$DEVICE" --sizes "$sizes" --steps 3 \
        --models unicornn,unicornn-reversible,lem,lem-stepwise,ltc,lrcu-a,lstm --out "$RESULTS/kernel_trace_$DEVICE.json"
    # LEM's grid kernels with tensor-core products: BF16 took 17.6 ms a step at hidden 128 against IEEE's 47.1 on
    # 2026-12-04 -- which of the forward's and the backward's time the IEEE products hold
    step trace-products 60 $PY benchmarks/kernel_trace.py --device "$DEVICE" --sizes "${sizes#*,}" --steps 3 \
        --models lem,cornn --products bf16,tf32 --out "$RESULTS/kernel_trace_${DEVICE}_products.json"
}

generic() {
    step generic 60 $PY benchmarks/cell_speed.py --device "$DEVICE" --models lem,lem-handwritten \
        --engines generic --sizes "$SIZES" --repeats 2 --out "$RESULTS/cell_speed_${DEVICE}_generic.json"
}

solvers() {
    if [ "$SMOKE" = 1 ]; then
        step solvers 300 $PY benchmarks/solvers.py --quick --repeats 1 --no-compile --no-large-state \
            --out "$RESULTS/solvers_$DEVICE.json"
    else
        step solvers 115 $PY benchmarks/solvers.py --device cuda --batches 1280 16384 131072 --repeats 3 \
            --large-repeats 2 --no-compile --out "$RESULTS/solvers_cuda.json"
    fi
}

enso() {
    if [ "$SMOKE" = 1 ]; then
        step enso 300 $PY benchmarks/enso_torchdde.py --batch 8 --horizon 20 --repeats 1 --torchdde-repeats 1 \
            --reference-subset 4 --no-compile --out "$RESULTS/enso_$DEVICE.json"
    else
        step enso 150 $PY benchmarks/enso_torchdde.py --device cuda --batch 131072 --torchdde-batch 1024 \
            --reference-subset 256 --repeats 2 --torchdde-repeats 1 --out "$RESULTS/enso_cuda.json"
    fi
}

profile() {  # Nsight Compute: where the steps of LEM's grid kernels (hidden 128, T = 50) and UnICORNN's (hidden 16,
    # T = 200) stall
    if [ "$SMOKE" = 1 ] || ! command -v ncu >/dev/null; then
        echo "== profile: skipped (SMOKE, or no ncu on this machine)"
        return
    fi
    local sections=(--section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy
                    --section MemoryWorkloadAnalysis --section SourceCounters)
    step profile 100 ncu --clock-control none --launch-count 2 -k "regex:_lem_grid_forward$|_lem_grid_backward" \
        "${sections[@]}" $PY benchmarks/cell_speed.py --device cuda \
        --models lem --engines fused --sizes 128x50x128 --repeats 1 --no-forward --back-to-back 0 --out /tmp/profile.json
    step profile-unicornn 60 ncu --clock-control none --launch-count 2 -k "regex:^_forward$|^_backward$" \
        "${sections[@]}" $PY benchmarks/cell_speed.py --device cuda \
        --models unicornn --engines fused --sizes 32x200x16 --repeats 1 --no-forward --back-to-back 0 --out /tmp/profile_u.json
}

coldstart() {  # issue 14's first call on the GPU from empty caches (Triton's and odelab's), against diffrax's jit
    local triton_cache odelab_cache
    triton_cache=$(mktemp -d) odelab_cache=$(mktemp -d)
    local batch=1280 device=cuda
    [ "$SMOKE" = 1 ] && batch=64 device=cpu
    step coldstart 70 env TRITON_CACHE_DIR="$triton_cache" ODELAB_CACHE="$odelab_cache" $PY benchmarks/solvers.py \
        --device "$device" --batches "$batch" --repeats 1 --no-compile --no-large-state --no-slow-anchors \
        --out "$RESULTS/solvers_${device}_cold.json"
    # a new configuration (another batch size) in a new process, the caches the first one filled: what a user pays
    # for each new shape once the machine has compiled odelab's kernels (diffrax's jit pays its compilation again)
    [ "$SMOKE" = 1 ] && batch=96 || batch=16384
    step newconfig 60 env TRITON_CACHE_DIR="$triton_cache" ODELAB_CACHE="$odelab_cache" $PY benchmarks/solvers.py \
        --device "$device" --batches "$batch" --repeats 1 --no-compile --no-large-state --no-slow-anchors \
        --out "$RESULTS/solvers_${device}_newconfig.json"
}

RUNS=${TMPDIR:-/tmp}/odelab-gpu-runs
EPOCHS=()
[ "$SMOKE" = 1 ] && EPOCHS=(--epochs 2)
[ -n "${FIT_EPOCHS:-}" ] && EPOCHS=(--epochs "$FIT_EPOCHS")  # e.g. the quick preset's generic run within a lease

summarise() {  # summarise OUT NAME...: the runs' results.json in one file
    $PY - "$RUNS" "$@" <<'EOF'
import json, sys
from pathlib import Path
runs, out, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
summary = {}
for name in names:
    path = runs / name / "results.json"
    summary[name] = json.loads(path.read_text()) if path.exists() else None
out.write_text(json.dumps(summary, indent=2, default=str))
print("written", out)
EOF
}

fit() {
    local preset=paper
    [ "$SMOKE" = 1 ] && preset=quick
    step fit 60 $PY -m odelab fit fhn --model lem --preset "$preset" "${EPOCHS[@]}" --device "$DEVICE" \
        --no-progress --out "$RUNS/paper"
    summarise "$RESULTS/fit_$DEVICE.json" paper
}

quickfit() {
    for engine in fused generic; do
        step "quickfit-$engine" 90 $PY -m odelab fit fhn --model lem --preset quick "${EPOCHS[@]}" \
            --device "$DEVICE" --engine "$engine" --no-progress --out "$RUNS/quick-$engine"
    done
    summarise "$RESULTS/fit_quick_$DEVICE.json" quick-fused quick-generic
}

[ $# -gt 0 ] || { sed -n '2,/^set -u/{/^set -u/!p}' "$0"; exit 2; }
for name in "$@"; do
    case "$name" in
        wheels) wheels ;;
        tests|grid|cells|liquid|irregular|dropout|liquidrows|barrier|fit|solvers|enso|tf32|tf32x3|bf16|trace|generic|quickfit|profile|coldstart|captured) [ -n "${SETUP_DONE:-}" ] || { setup; SETUP_DONE=1; }; "$name" ;;
        *) echo "unknown step: $name (wheels, tests, grid, cells, liquid, irregular, dropout, liquidrows, barrier, fit, solvers, enso, tf32, tf32x3, bf16, trace, generic, quickfit, profile, coldstart, captured)"; exit 2 ;;
    esac
done
