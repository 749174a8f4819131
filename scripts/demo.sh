#!/usr/bin/env bash
# Set up (or reuse) .venv with ragguard and its report extra, then calibrate the guard on
# the embedded example, examples/notes (precomputed runs: no model download, no server).
# Writes demo-output/ragguard.toml (the guard's config) and demo-output/report/.
# Extra arguments go to `ragguard calibrate`, e.g. bash scripts/demo.sh --profile medical
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh "report,calibrate"

ragguard calibrate examples/notes \
    --out demo-output/ragguard.toml --report demo-output/report "$@"
