# One entry point for people and CI: install, serve, test, lint, fmt, bench.
# `make serve` installs blazar alone and starts it on its embedded defaults, with an engine and a starter model;
# `make test` installs blazar with its test and dev extras, fetches and builds the test assets, runs the linters and
# every test.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.blazar-installed
TEST_STAMP := $(VENV)/.blazar-test-installed
NATIVE_SRC := $(shell find native/src -name '*.rs') native/Cargo.toml native/Cargo.lock
CYTHON_SRC := $(wildcard cython/src/blazar_sched/*) cython/pyproject.toml cython/setup.py
# The venv's tools first: its cmake and ninja (the dev extra) build the engines, not older ones on the machine's PATH.
export PATH := $(abspath $(VENV))/bin:$(PATH)
N ?= 3

.PHONY: install install-test serve test test-py test-native test-repeat assets wheels rust-components lint fmt \
	typecheck bench clean

install: $(STAMP)

# The package alone: what serving needs.
$(STAMP): pyproject.toml $(NATIVE_SRC) $(CYTHON_SRC)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e . ./cython
	touch $(STAMP)

# The package with the test and dev extras (pytest, the official SDKs, ruff, mypy, cmake, ninja).
install-test: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,dev]' ./cython
	touch $(TEST_STAMP)

# The first time, --starter installs the llama.cpp engine (its source built once per machine, when no release can
# be verified) and the starter model; later runs start at once.
serve: install
	$(VENV)/bin/blazar serve --starter

assets: install-test
	$(PY) scripts/test_assets.py

# Both wheels (cp311-abi3, manylinux) and both sdists in dist/: blazar's through maturin with zig, the scheduler's
# through build and auditwheel. Cargo's release build is cached under ~/.cache/blazar, shared by every clone.
DIST ?= dist
WHEEL_TARGET = $${BLAZAR_CACHE_DIR:-$$HOME/.cache/blazar}/wheel-target

wheels: install-test
	rm -rf $(DIST) && mkdir -p $(DIST)/sched
	CARGO_TARGET_DIR="$(WHEEL_TARGET)" $(VENV)/bin/maturin build --quiet --release --zig \
		--compatibility manylinux2014 --interpreter $(PY) --out $(DIST)
	$(VENV)/bin/maturin sdist --out $(DIST)
	$(PY) -m build --outdir $(DIST)/sched cython  # the wheel from the sdist: proof the sdist builds
	$(VENV)/bin/auditwheel repair --wheel-dir $(DIST) $(DIST)/sched/*.whl
	mv $(DIST)/sched/*.tar.gz $(DIST)/ && rm -rf $(DIST)/sched
	ls $(DIST)

test-native:
	cd native && cargo test --quiet

test-py: install-test assets wheels
	$(PY) -m pytest

test: install-test lint test-native test-py

# The end-to-end and CLI tests N times in a row (`make test-repeat N=5`), stopping at the first red run: the check
# that no test depends on the machine's speed. Run it beside a CPU-heavy job to see it under load.
test-repeat: install-test assets
	@for i in $$(seq 1 $(N)); do \
		echo "== test-repeat: run $$i of $(N)"; \
		$(PY) -m pytest tests/e2e tests/cli -q || { echo "== test-repeat: run $$i of $(N) failed"; exit 1; }; \
	done; echo "== test-repeat: $(N) of $(N) runs passed"

# rustup's clippy and rustfmt, which lint uses: added where rustup can, else named.
rust-components:
	@missing=""; cargo clippy --version >/dev/null 2>&1 || missing="$$missing clippy"; \
	cargo fmt --version >/dev/null 2>&1 || missing="$$missing rustfmt"; \
	if [ -n "$$missing" ]; then \
		if command -v rustup >/dev/null 2>&1 && rustup component add $$missing; then exit 0; fi; \
		echo "error: the Rust toolchain lacks$$missing, which make lint runs: rustup component add$$missing"; \
		exit 1; \
	fi

lint: install-test rust-components
	$(VENV)/bin/ruff check python tests scripts benches
	$(VENV)/bin/ruff format --check python tests scripts benches
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest blazar._native blazar_sched
	cd native && cargo fmt --check && cargo clippy --quiet --all-targets -- -D warnings
	$(VENV)/bin/hadolint Dockerfile Dockerfile.cuda

typecheck: install-test
	$(VENV)/bin/mypy

fmt: install-test
	$(VENV)/bin/ruff check --fix python tests scripts benches
	$(VENV)/bin/ruff format python tests scripts benches
	cd native && cargo fmt

bench: install-test assets
	$(PY) benches/bench_native.py
	$(PY) benches/bench_sched.py
	$(PY) benches/bench_middleware.py
	$(PY) benches/bench_gateway.py
	$(PY) benches/bench_stack.py
	$(PY) benches/bench_defaults.py

clean:
	rm -rf $(VENV) native/target build dist
