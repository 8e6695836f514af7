# Switchboard: every target creates the project's virtualenv and installs on first use.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.switchboard-installed
# Extra arguments: `make serve ARGS="+policy=shortest_prefill"`, `make test ARGS="-k config"`
# (for `test` they go to pytest only, not to the lint step).
ARGS   ?=

.PHONY: serve test lint install lock clean-venv

serve: $(STAMP)
	$(PY) -m server $(ARGS)

# Lint (ruff: rules, import order) and type checks (mypy: the files in pyproject.toml's
# [tool.mypy]); configured in pyproject.toml.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

# `make test` lints first: a lint or type error stops it before pytest.
# NOTE: the CPU model runs with one OpenMP thread in tests: two threads are slower
# when the other core is busy with the test client and the HF reference.
# NOTE: TEST_WORKERS pytest-xdist workers (one per core here): a live test mostly
# waits on one single-threaded server, so two run side by side; a module (its
# server) stays on one worker (the scheduler in tests/conftest.py). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: lint
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) $(ARGS)

install: $(STAMP)

$(STAMP): pyproject.toml requirements/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c requirements/constraints.txt -e '.[test]'
	touch $(STAMP)

# Re-pin after changing dependencies in pyproject.toml.
lock: $(STAMP)
	$(PY) -m pip freeze --exclude-editable > requirements/constraints.txt

clean-venv:
	rm -rf $(VENV)

# deploy/: `deploy-check` renders, validates and lints offline (also part of `make test`);
# `image-test` builds the CPU image with podman (installs podman & co. via apt when missing,
# root), serves from it, sends a chat completion and stops it (deploy/image_test.py).
# `image-build` only builds; `image-clean` deletes the images and their layer cache.
.PHONY: deploy-check image-test image-build image-clean

deploy-check: $(STAMP)
	$(PY) -m pytest tests/deploy $(ARGS)

image-test: $(STAMP)
	$(PY) deploy/image_test.py

image-build: $(STAMP)
	$(PY) deploy/image_test.py --build-only

image-clean: $(STAMP)
	$(PY) deploy/image_test.py --clean
