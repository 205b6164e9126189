# Two commands do everything (see README): `make bench` and `make test`.
PYTHON ?= python3
VENV ?= .venv
# A tested torch release; pip takes a CPU build where one is on disk and the CUDA build on a GPU box.
TORCH_SPEC ?= torch==2.13.0
SUITE ?= efficiency
# Extra flags for bench.py, e.g. BENCH_ARGS="--profile gpu" (the GPU workflow passes that).
BENCH_ARGS ?=
BIN := $(VENV)/bin

.PHONY: install bench test lint test-fast kernels-bench gpu-check docs-results clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The install stamp names the torch spec and pyproject.toml's content (hashed: a spec may hold
# < > , *), so `make test TORCH_SPEC=torch==2.14.1` or a changed dependency reinstalls, and a fresh
# checkout of the same pyproject.toml (newer on disk) does not: the GPU workflow keeps its venv
# outside the workspace (VENV=...) across checkouts.
TORCH_STAMP := $(VENV)/.installed-$(shell { printf '%s\n' '$(TORCH_SPEC)'; cat pyproject.toml; } | cksum | cut -d' ' -f1)

$(TORCH_STAMP): $(BIN)/python
	rm -f $(VENV)/.installed-*
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

install: $(TORCH_STAMP)

# `make bench` installs only what a run needs (torch and posbench, no dev extras: pytest, ruff),
# its own stamp beside install's; a venv `make install` already filled runs as it is.
RUN_STAMP := $(VENV)/.installed-run-$(shell { printf '%s\n' '$(TORCH_SPEC)'; cat pyproject.toml; } | cksum | cut -d' ' -f1)

$(RUN_STAMP): $(BIN)/python
	rm -f $(VENV)/.installed-run-*
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e .
	touch $@

bench: $(if $(wildcard $(TORCH_STAMP)),$(TORCH_STAMP),$(RUN_STAMP))
	$(BIN)/python bench.py --suite $(SUITE) $(BENCH_ARGS)

# Everything, slow and subprocess tests included: what .ci/run and CI call. Two pytest-xdist
# workers (TEST_WORKERS; 0 runs in this process), one OpenMP thread each (tests/conftest.py), the
# longest modules first (tests/conftest.py orders them; --no-loadscope-reorder keeps xdist from
# re-sorting modules by test count); about 10 minutes on a quiet 2-core machine (the CI
# machine, an AMD EPYC, nothing else running: docs/ci.md).
# --dist loadscope keeps a module's tests in one worker, so a module-scoped fixture (a trained
# model) is built once.
# --durations=25 prints the slowest tests, so a CI log says where its time went.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=25

# The quick loop while editing: every test but those marked `slow` (long-running) or `subprocess`
# (they start a process: bench.py, the runner's workers, torchrun, make, pip), under 2 minutes on a
# quiet 2-core machine (the CI machine, an AMD EPYC, nothing else running). The markers are
# registered in pyproject.toml ([tool.pytest.ini_options]).
test-fast: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder -m "not slow and not subprocess"

# ruff check: pyflakes' checks and the import order; ruff format --check: the layout. To fix both:
# ruff check --fix . && ruff format . (config in pyproject.toml).
lint: install
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

kernels-bench: install
	$(BIN)/python -m pytest -q tests/tasks/test_kernels_timed_points.py --benchmark-only --benchmark-group-by=group

# On a CUDA machine: compiled kernel tests, conformance on CUDA, a short kernels suite and a short
# efficiency run, summarised in $(GPU_CHECK_OUT)/gpu-check.md (posbench/triton_kernels/gpu_check.py).
# Uses the venv when there is one, else $(PYTHON) as it is (a GPU box with torch and triton).
GPU_CHECK_OUT ?= results/gpu-check
GPU_CHECK_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
# DRY=1: print the steps with their time limits and the total, run nothing (any machine).
gpu-check:
	$(GPU_CHECK_PYTHON) -m posbench.triton_kernels.gpu_check --out $(GPU_CHECK_OUT) --python $(GPU_CHECK_PYTHON) $(if $(DRY),--dry-run)

# Result pages for docs/results/ from run folders (posbench/cli/docs_results.py): one page per
# suite and machine with the date, commit, machine, the command that reproduces the run and its tables.
# make docs-results: every docs/results page and its index, rebuilt from results/published/
# (bench.py publish RUN puts a run there); RUNS="results/<suite>/<run-id> ..." writes only the
# pages of those run folders into DOCS_RESULTS (a preview: the committed pages come from published runs).
RUNS ?=
DOCS_RESULTS ?= docs/results
docs-results: install
	$(BIN)/python -m posbench.cli.docs_results --out $(DOCS_RESULTS) $(if $(RUNS),$(RUNS),--published results/published)

clean:
	rm -rf $(VENV) .pytest_cache
