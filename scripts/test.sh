#!/usr/bin/env bash
# Set up (or reuse) .venv with everything the tests need, then run lint, types and tests.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate

# constraints.txt pins torch to the CPU build; see the README's "Development" section.
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -c constraints.txt -e ".[all,dev]"

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy (strict, src/ragguard)"
mypy
echo "== pytest"
python -m pytest "$@"
