# Parallel Explorer: two commands.
#   make explore    create .venv, install everything, open JupyterLab on notebooks/
#   make test       install what the tests need, run ruff and the whole test suite
# and the inner loop:
#   make test-fast  unit and property tests only (no browser, no notebooks, no slow files)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# make test runs on TEST_WORKERS pytest-xdist processes, make test-fast on WORKERS, a file's
# tests together on one (tests/conftest.py hands out files longest first, tests/browser/ as one
# piece of work). Clean clones of this 2-core machine, otherwise idle, .ci/run: 4237 tests,
# two workers, 7 min 23 s (pytest 6 min 57 s; 2026-12-02 late; 4211 tests that night:
# 7 min 18 s; 4201 tests that evening:
# 8 min 52 s; 4135 tests that afternoon: 8 min 25 s; 3709 tests earlier that day: 7 min
# 2 s; 3483 tests before plan_training was made faster: 10 min 38 s). Earlier, with 3081 tests:
# two workers 14 min 17 s with pip --no-compile (installs 1 min, pytest 13 min 12 s), 15 min
# 9 s before it (installs 2 min 34 s, pytest 12 min 35 s; the browser tier holds one worker),
# three workers 16 min 39 s (pytest 14 min 0 s: the third worker's CPU contention costs more
# than the browser tier's waits leave), one process 18 min 24 s.
# --durations prints the 30 slowest tests at the end of every run.
WORKERS ?= 2
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest
PYTEST_XDIST := $(PYTEST) -n $(WORKERS) --dist loadfile

.PHONY: explore test test-fast bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# What each command installed, redone when pyproject.toml changes.
$(VENV)/.installed-explore: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[notebook,jax,torch,hf]'
	touch $@

# --no-compile: no .pyc for every file of torch, jax and transformers at install time (the
# install took 1 min instead of 2 min 34 s); Python writes those of the modules the tests
# import when it first imports them.
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-compile -e '.[dev,notebook,jax,torch,hf]'
	touch $@

# scripts/explore.py: --allow-root for root, --no-browser without a display, prints the URL.
# Extra Jupyter options: make explore JUPYTER_ARGS="--ServerApp.ip=0.0.0.0"
explore: $(VENV)/.installed-explore
	$(BIN)/python scripts/explore.py notebooks $(JUPYTER_ARGS)

test: $(VENV)/.installed-test /usr/bin/chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile --durations=30

test-fast: $(VENV)/.installed-test
	$(PYTEST_XDIST) -m "not browser and not slow"

# The browser test drives Debian's Chromium (Playwright's own browser download is not used).
/usr/bin/chromium:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

bench: $(VENV)/.installed-test
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
