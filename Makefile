# Every target sets up what it needs: a fresh machine needs only python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast lint types pytest demo worker bench manifests clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

test: lint types pytest

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

types: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q

# The pure core only (tests marked `unit`, tests/conftest.py says which): domain,
# classifier, policy, parsers, workflow replay; under a minute here, where the whole
# suite (`make test`) takes about 13 minutes on 2 cores.
test-fast: $(STAMP)
	$(BIN)/pytest -q -m unit

# deploy/ from the Helm chart (charts/gpu-remediation), its one source.
manifests: $(STAMP)
	$(BIN)/python -m tests.deploy.make_manifests

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

# The whole system on a simulated fleet; `make demo DEMO_ARGS="--keep-running"` to pass flags.
demo: $(STAMP)
	$(BIN)/remediate demo $(DEMO_ARGS)

worker: $(STAMP)
	$(BIN)/python worker.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
