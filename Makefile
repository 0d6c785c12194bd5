# odelab developer Makefile.
#
#   make venv    create/reuse .venv and install odelab (+ test extra)
#   make test    run the test suite, one worker per logical core up to TEST_WORKERS=4 (slow tests deselected; see pyproject.toml)
#   make test-long   the same with the long hypothesis profile (1000 examples per property)
#   make demo    fit FitzHugh-Nagumo with LEM, results in runs/demo
#   make bench   run every benchmark in benchmarks/ (installs the bench extra; ~10 min, JSON in benchmarks/results/)
#   make clean   remove the venv and build/test artefacts (keeps runs/ and .odelab_cache/)
#
# Variables:
#   PYTHON=python3.11                       interpreter used to create .venv
#   VENV_FLAGS=--system-site-packages       reuse a system-wide torch instead of installing one
#   TORCH_SPEC='torch==2.13.0'              torch requirement installed when .venv has no torch
#                                           (may carry pip options, e.g.
#                                            TORCH_SPEC='torch --index-url https://download.pytorch.org/whl/cu124')
# torch is only installed when it is not already importable in .venv, so an existing
# torch (CPU or CUDA, venv or --system-site-packages) is never replaced.

PYTHON     ?= python3
VENV       ?= .venv
VENV_FLAGS ?=
TORCH_SPEC ?=
# torch build used on machines without a working nvidia-smi.
CPU_TORCH_SPEC ?= torch==2.13.0

PY    := $(VENV)/bin/python
PIP   := $(PY) -m pip
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: venv test test-long demo bench clean

venv: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)

# Re-run the install when pyproject.toml changes, or when odelab/__init__.py first
# appears (an editable install made before the package existed maps nothing).
$(STAMP): pyproject.toml $(wildcard odelab/__init__.py) | $(PY)
	@set -e; \
	if $(PY) -c 'import torch' >/dev/null 2>&1; then \
	  echo "Using installed torch $$($(PY) -c 'import torch; print(torch.__version__)')"; \
	else \
	  spec='$(TORCH_SPEC)'; \
	  if [ -z "$$spec" ]; then \
	    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
	      spec='torch'; \
	    else \
	      spec='$(CPU_TORCH_SPEC)'; \
	    fi; \
	  fi; \
	  echo "Installing $$spec into $(VENV) ..."; \
	  $(PIP) install -q $$spec; \
	fi
	@echo "Installing odelab (editable, [test]) into $(VENV) ..."
	@$(PIP) install -q -e '.[test]'
	@touch $@

$(BENCH_STAMP): $(STAMP)
	@$(PIP) install -q -e '.[test,bench]'
	@touch $@

# One pytest worker per core (each test runs one torch thread; see tests/conftest.py), at most TEST_WORKERS.
TEST_WORKERS ?= 4

test: venv
	@$(PY) -c 'import platform, torch; print(f"Python {platform.python_version()}, torch {torch.__version__}")'
	$(PY) -m pytest -q -n logical --maxprocesses=$(TEST_WORKERS)

test-long: venv
	@$(PY) -c 'import platform, torch; print(f"Python {platform.python_version()}, torch {torch.__version__}")'
	HYPOTHESIS_PROFILE=long $(PY) -m pytest -q -n logical --maxprocesses=$(TEST_WORKERS)

demo: venv
	$(VENV)/bin/odelab fit fhn --model lem --threads 1 --out runs/demo

bench: $(BENCH_STAMP)
	$(PY) benchmarks/cell_speed.py
	$(PY) benchmarks/solvers.py
	$(PY) benchmarks/dense_output.py
	$(PY) benchmarks/irregular.py
	$(PY) benchmarks/enso_torchdde.py
	$(PY) benchmarks/unicornn_memory.py --threads 1
	$(PY) benchmarks/adjoint_memory.py
	$(PY) benchmarks/graph_layer.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
