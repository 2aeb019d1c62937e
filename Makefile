# Parallel Explorer: two commands.
#   make explore   create .venv, install everything, open JupyterLab on notebooks/
#   make test      install what the tests need, run ruff and the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: explore test bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# scripts/explore.py: --allow-root for root, --no-browser without a display, prints the URL.
# Extra Jupyter options: make explore JUPYTER_ARGS="--ServerApp.ip=0.0.0.0"
explore: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[notebook,jax,torch,hf]'
	$(BIN)/python scripts/explore.py notebooks $(JUPYTER_ARGS)

test: $(BIN)/python /usr/bin/chromium
	$(BIN)/python -m pip install --quiet -e '.[dev,notebook,jax,torch,hf]'
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

# The browser test drives Debian's Chromium (Playwright's own browser download is not used).
/usr/bin/chromium:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

bench: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,notebook,jax,torch,hf]'
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
