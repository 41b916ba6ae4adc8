# One entry point for people and CI: install, serve, test, lint, fmt, bench.
# `make serve` installs and starts blazar on its embedded defaults; `make test` installs and runs every test.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.blazar-installed
NATIVE_SRC := $(shell find native/src -name '*.rs') native/Cargo.toml native/Cargo.lock
CYTHON_SRC := $(wildcard cython/src/blazar_sched/*) cython/pyproject.toml cython/setup.py

.PHONY: install serve test test-py test-native assets lint fmt typecheck bench clean

install: $(STAMP)

$(STAMP): pyproject.toml $(NATIVE_SRC) $(CYTHON_SRC)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]' ./cython
	touch $(STAMP)

serve: install
	$(VENV)/bin/blazar serve

assets: install
	$(PY) scripts/test_assets.py

test-native:
	cd native && cargo test --quiet

test-py: install assets
	$(PY) -m pytest

test: install lint test-native test-py

lint: install
	$(VENV)/bin/ruff check python tests scripts benches
	$(VENV)/bin/ruff format --check python tests scripts benches
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest blazar._native blazar_sched
	cd native && cargo fmt --check && cargo clippy --quiet --all-targets -- -D warnings

typecheck: install
	$(VENV)/bin/mypy

fmt: install
	$(VENV)/bin/ruff check --fix python tests scripts benches
	$(VENV)/bin/ruff format python tests scripts benches
	cd native && cargo fmt

bench: install assets
	$(PY) benches/bench_native.py
	$(PY) benches/bench_sched.py
	$(PY) benches/bench_middleware.py
	$(PY) benches/bench_gateway.py
	$(PY) benches/bench_stack.py

clean:
	rm -rf $(VENV) native/target build dist
