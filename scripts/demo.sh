#!/usr/bin/env bash
# Set up (or reuse) .venv with ragguard and run the guard's quick-start example.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e .

python examples/quickstart.py
