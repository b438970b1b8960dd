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
	$(TCH_ENV) cargo clippy --features tch --all-targets -- -D warnings
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The pure core, then the Rust API on real tch models (torch-sys uses the venv's torch 2.13.0)
# and the tch example.
TCH_ENV := PATH=$(abspath $(VENV))/bin:$$PATH VIRTUAL_ENV=$(abspath $(VENV)) LIBTORCH_USE_PYTORCH=1

test-rust: $(VENV)/.deps
	cargo test --no-default-features
	$(TCH_ENV) cargo test --features tch --test tch_models
	$(TCH_ENV) cargo run --quiet --features tch --example tch_mlp > /dev/null

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
