# Pet Records. `make run` serves on 127.0.0.1:8000 (SQLite in ./data; PORT=… HOST=… to change it);
# `make test` runs the linters, the type checks and every test but the long ones (the documentation build among
# them), on PYTEST_WORKERS processes; `make test-quick` the tests of one change, in seconds; `make test-long` the
# long ones, and every property-based test again with the full number of examples.
PYTHON ?= python3
HOST ?= 127.0.0.1
PORT ?= 8000
VENV := .venv
UV := $(VENV)/bin/uv
UV_VERSION := 0.13.9
export UV_PROJECT_ENVIRONMENT := $(abspath $(VENV))
export NO_MKDOCS_2_WARNING := 1
# pytest keeps each test module it rewrote for its assertions as bytecode beside it, which PYTHONDONTWRITEBYTECODE
# (set on many CI machines) forbids: every worker of every run then rewrote them all again, and collecting the
# suite took 13 s of CPU in each instead of 6.
unexport PYTHONDONTWRITEBYTECODE

# Four test processes on two cores: much of the suite's time is spent waiting (servers starting, outages and
# restarts played out), which more processes fill. On a quiet machine, 5,545 tests: three took 486 s (CPU 679 s),
# four 419 s (CPU 620 s). Under a load of 7-12 from other jobs a fourth had gained only 4-9 %.
PYTEST_WORKERS ?= 4
LONG_TEST_WORKERS ?= 3

.PHONY: install compile run dist test test-quick test-long bench lint typecheck docs reference check clean

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# Bytecode compiled at install: with PYTHONDONTWRITEBYTECODE set (as on many CI machines) every process would
# otherwise compile the framework again from source, a quarter of a second of every server's start.
$(VENV)/.installed: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --quiet --compile-bytecode
	touch $@

install: $(VENV)/.installed

# Our own modules' bytecode too (a fifth of a second of every process's start), written anew as they change.
compile: install
	@$(VENV)/bin/python -m compileall -q -j 0 src tests >/dev/null

run: install compile
	$(VENV)/bin/petrecords serve --host $(HOST) --port $(PORT)

# A production install's two files, in dist/ (docs/how-to/install.md): the wheel, whose dependencies are the
# service's alone (the tools `make install` adds are pyproject.toml's dev group), and requirements.txt, the
# versions of uv.lock that the tests ran, with their hashes. --locked: a lock behind pyproject.toml is refused.
dist: $(UV)
	rm -rf dist
	$(UV) build --wheel --out-dir dist --quiet
	$(UV) export --locked --no-dev --no-emit-project --quiet --output-file dist/requirements.txt

# The type check runs beside the tests, on the core they leave idle while their servers start; its output follows
# theirs. The documentation build is one of the tests (tests/docs/test_site.py, strict). worksteal: a worker that
# runs out of tests takes half of another's queue (with xdist's default, one sat idle for minutes at the end).
test: install compile
	$(VENV)/bin/ruff check src tests bench docs
	$(VENV)/bin/ruff format --check src tests bench docs
	@typed=$$(mktemp); $(VENV)/bin/mypy > $$typed 2>&1 & typing=$$!; \
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist worksteal -m "not long"; tests=$$?; \
	wait $$typing; types=$$?; echo "mypy:"; cat $$typed; rm -f $$typed; \
	[ $$tests -eq 0 ] && [ $$types -eq 0 ]

# The tests of one change (every file that differs from main, committed or not), on SQLite only and without the
# long ones: tests/quick.py says which tests each file leads to. QUICK_ARGS go to pytest (QUICK_ARGS="-x -k create").
test-quick: install
	$(VENV)/bin/python -m tests.quick $(if $(QUICK_ARGS),-- $(QUICK_ARGS))

# Handed out one by one, the heaviest first (see tests/conftest.py), so that none is left to run alone at the end.
test-long: install compile
	$(VENV)/bin/pytest -n $(LONG_TEST_WORKERS) --dist load -m "long or hypothesis" --hypothesis-profile=long \
		--durations=20

# Load benchmark (see bench/README.md); BENCH_ARGS="--database postgresql --rows 10000" and so on.
bench: install
	@command -v wrk >/dev/null || { $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y wrk || \
		{ $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update && $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y wrk; }; }
	$(VENV)/bin/python bench/run.py $(BENCH_ARGS)

lint: install
	$(VENV)/bin/ruff check src tests bench docs
	$(VENV)/bin/ruff format --check src tests bench docs

typecheck: install
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/) into site/; strict: a broken link or a warning fails.
docs: install
	$(VENV)/bin/mkdocs build --strict

# The reference pages' generated parts (every setting, command and error) written from the code into
# docs/reference/*.md, which are committed as written; tests/docs/test_reference.py fails when one differs.
reference: install
	$(VENV)/bin/python docs/reference.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis site dist
