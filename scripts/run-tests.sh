#!/usr/bin/env bash
# The test run behind `make test` and .ci/run: lint, start services, pytest, stop services.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/ruff format --check .
PYTHONPATH=include .venv/bin/lint-imports
trap 'bash scripts/services.sh down' EXIT
eval "$(bash scripts/services.sh up)"
.venv/bin/python -m pytest "$@"
