#!/usr/bin/env bash
# Set up (or reuse) .venv with ragguard and run the guard's quick-start example.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh ""

python examples/quickstart.py
