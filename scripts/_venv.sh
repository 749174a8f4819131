# Sourced by demo.sh and test.sh: create (or reuse) .venv, activate it, and install
# ragguard editable with the extras given as $1 (e.g. "all,dev"; empty for core only).
# constraints.txt pins torch to the CPU build; see the README's "Development" section.
python_bin=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -c constraints.txt -e ".${1:+[$1]}"
