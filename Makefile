# Everything the README promises, from a fresh machine with Python >= 3.11, cargo and g++.
#   make demo   set up, then analyse the built-in example model (torchscan CLI) and measure resnet18
#   make test   set up, then lint and run every test (what CI runs)
#   make bench  set up, then run the overhead benchmark
#   make docs   regenerate docs/formulas.md from the formula registry
#   make schemas  regenerate python/torchscan/schemas/ from the report model (src/report/)
#   make screenshots  regenerate docs/img/ (the HTML report in headless Chromium)
#   make sanitize  ASan/UBSan C++ shim and valgrind'd Rust core tests (docs/reliability.md)
#   make lock   regenerate requirements-dev.lock (pinned, hashed) from requirements-dev.txt
#   make wheel  a binary wheel for the venv's torch, in dist/ (docs/installing.md)
#   make test-torch TORCH=2.11.0  build and run the core tests against another torch, in its own venv

PYTHON ?= python3
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
# build.rs asks this interpreter where torch is; setup.py passes the same one.
export TORCHSCAN_PYTHON := $(PY)

.PHONY: setup demo test lint test-rust test-python bench docs schemas screenshots sanitize clean wheel test-torch lock

# The development environment from the lock (every distribution at one version, with its hash);
# `make lock` regenerates the lock after requirements-dev.txt changes.
$(VENV)/.deps: requirements-dev.lock
	@echo "make: creating $(VENV) with the pinned development dependencies (torch and the test tools; a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --require-hashes -r requirements-dev.lock
	touch $@

lock:
	$(PYTHON) tools/lock_requirements.py

# The package build compiles the Rust core and the C++ shim against the venv's torch: about four
# minutes the first time, with nothing printed meanwhile (pip -q), hence the line before it.
setup: $(VENV)/.deps
	@echo "make: building torchscan's native library (Rust core and C++ shim, cargo build --release) and installing it into $(VENV); the first build takes about 4 minutes"
	$(PY) -m pip install -q --no-build-isolation --no-deps --force-reinstall .

demo: setup
	@echo "make demo: the torchscan command on its built-in example network, then examples/demo.py (resnet18)"
	$(abspath $(VENV))/bin/torchscan
	$(PY) examples/demo.py

# Formatted by clang-format (.clang-format), checked by `make lint`.
CPP_SOURCES := cpp/*.cpp cpp/*.h benches/*.cpp cpp/include/torchscan/*.h examples/cpp/main.cpp python/torchscan/_hooks.c python/torchscan/_wire.c python/torchscan/_guards.c

lint: $(VENV)/.deps
	cargo fmt --check
	cargo clippy --no-default-features --all-targets -- -D warnings
	cargo clippy --release --all-targets -- -D warnings
	$(TCH_ENV) cargo clippy --features tch --all-targets -- -D warnings
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(abspath $(VENV))/bin/clang-format --dry-run --Werror $(CPP_SOURCES)
	$${CC:-cc} -fsyntax-only -Wall -Wextra -Werror -I"$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" python/torchscan/_hooks.c python/torchscan/_wire.c python/torchscan/_guards.c

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

# A binary wheel (docs/installing.md): torchscan-<version>+torch<torch>-cp311-cp311-<platform>.whl,
# requiring exactly the torch it was built against. tests/python/test_wheel.py builds one the same
# way and installs it where there is no cargo and no compiler.
wheel: $(VENV)/.deps
	$(PY) -m pip wheel -q --no-build-isolation --no-deps -w dist .

# The core tests (those that need torch alone) against another torch release, built from this
# checkout in a venv of its own (.venv-torch-<version>; pip's cache keeps the download). The oldest
# supported torch runs in CI (.ci/run); docs/installing.md states the range these prove.
TORCH ?=
TORCH_VENV := .venv-torch-$(TORCH)
TORCH_PY := $(abspath $(TORCH_VENV))/bin/python
CORE_TESTS := test_formulas_exact.py test_operator_families.py test_observation_rule.py test_count_flops.py \
	test_module_labels.py test_module_formulas.py test_bad_input.py test_overflow.py test_threads.py \
	test_peak_memory.py test_compare_reports.py test_schemas.py test_packaging.py test_quantized.py \
	test_truth.py test_compiled.py test_merge.py

test-torch:
	@test -n "$(TORCH)" || { echo "usage: make test-torch TORCH=<version> (for example 2.11.0)"; exit 2; }
	test -x $(TORCH_PY) || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_PY) -m pip install -q --disable-pip-version-check torch==$(TORCH) "setuptools>=70" pytest==9.2.0 \
		jsonschema==4.26.0 hypothesis==6.170.17 numpy
	TORCHSCAN_PYTHON=$(TORCH_PY) $(TORCH_PY) -m pip install -q --no-build-isolation --no-deps --force-reinstall .
	cd tests/python && $(TORCH_PY) -m pytest -q -p no:cacheprovider $(CORE_TESTS)

bench: setup
	$(PY) benches/overhead.py

# Native hygiene (docs/reliability.md): the C++ shim built with AddressSanitizer and UBSan runs
# the C++ example (counters, scopes, the observer, the memory reporter; leaks checked), and the
# Rust core's unit tests run under valgrind memcheck.
SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

sanitize: $(VENV)/.deps
	CARGO_TARGET_DIR=target/sanitize CXXFLAGS="$(SANITIZE)" cargo build --release --lib
	$(MAKE) -C examples/cpp PYTHON=$(PY) OUT=$(abspath target/sanitize/cpp-example) \
		TORCHSCAN_LIB=$(abspath target/sanitize/release/libtorchscan.a) CXX="$(CXX) $(SANITIZE)"
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 target/sanitize/cpp-example/main > /dev/null
	cargo test --no-default-features --no-run 2>&1 | sed -n 's/.*Executable unittests src\/lib.rs (\(.*\))/\1/p' > target/core-tests
	valgrind --quiet --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
		$$(cat target/core-tests) --test-threads=2 -q

# Regenerates docs/formulas.md from the formula registry (a test fails when they disagree).
docs:
	TORCHSCAN_BLESS=1 cargo test --no-default-features docs_formulas_md

# Regenerates the JSON Schemas from the report model (a test fails when they disagree).
schemas:
	TORCHSCAN_BLESS=1 cargo test --no-default-features checked_in_schemas

# The HTML report's pictures in docs/img/, taken in headless Chromium (apt-get install chromium).
screenshots: setup
	$(PY) tools/screenshots.py

clean:
	rm -rf $(VENV) build target python/torchscan/_lib *.egg-info
