# Everything the README promises, from a fresh machine with Python >= 3.11, cargo and g++.
#   make demo   set up, then measure the built-in example model
#   make test   set up, then lint and run every test (what CI runs)
#   make bench  set up, then run the overhead benchmark
#   make docs   regenerate docs/formulas.md from the formula registry

PYTHON ?= python3
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
# build.rs asks this interpreter where torch is; setup.py passes the same one.
export TORCHSCAN_PYTHON := $(PY)

.PHONY: setup demo test lint test-rust test-python bench docs clean

$(VENV)/.deps: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

setup: $(VENV)/.deps
	$(PY) -m pip install -q --no-build-isolation --no-deps --force-reinstall .

demo: setup
	$(PY) examples/demo.py

lint: $(VENV)/.deps
	cargo fmt --check
	cargo clippy --no-default-features --all-targets -- -D warnings
	cargo clippy --release --all-targets -- -D warnings
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test-rust:
	cargo test --no-default-features

test-python: setup
	$(PY) -m pytest -q

test: setup lint test-rust test-python

bench: setup
	$(PY) benches/overhead.py

# Regenerates docs/formulas.md from the formula registry (a test fails when they disagree).
docs:
	TORCHSCAN_BLESS=1 cargo test --no-default-features docs_formulas_md

clean:
	rm -rf $(VENV) build target python/torchscan/_lib *.egg-info
