#!/usr/bin/env bash
# Set up (or reuse) .venv with everything the tests need, then run lint, types and tests.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh "all,dev"

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy (strict, src/ragguard)"
mypy
echo "== pytest"
python -m pytest "$@"
