# Pet Records. `make run` serves on 127.0.0.1:8000 (SQLite in ./data; PORT=… HOST=… to change it);
# `make test` runs every test but the long ones (a million rows, minutes each), which `make test-long` runs.
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8000
VENV := .venv
UV := $(VENV)/bin/uv
UV_VERSION := 0.13.9
export UV_PROJECT_ENVIRONMENT := $(abspath $(VENV))

.PHONY: install run test test-long bench lint typecheck check clean

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(VENV)/.installed: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --quiet
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/petrecords serve --host $(HOST) --port $(PORT)

test: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -m "not long"

test-long: install
	$(VENV)/bin/pytest -m long -s

# Load benchmark (see bench/README.md); BENCH_ARGS="--database postgresql --rows 10000" and so on.
bench: install
	@command -v wrk >/dev/null || { $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y wrk || \
		{ $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update && $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y wrk; }; }
	$(VENV)/bin/python bench/run.py $(BENCH_ARGS)

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: install
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
