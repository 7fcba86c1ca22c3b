#!/usr/bin/env bash
# Runs one Python test script of this directory with the binding the build staged, installed:
#   run.sh <build>/python <script.py> [arguments of the script]
# in the cached environment of setup_env.sh (built on first use: several GB, minutes).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="$(bash "$here/setup_env.sh" "${ROPEGEN_BASE_PYTHON:-python3}")"
# The tests import the package as pip installs it from the build's staging directory (a wheel
# built from python/pyproject.toml, with libropegen.so), into a directory of their own. The wheel
# is built from a copy of the package's files: setuptools writes its build files beside them, and
# tests running in parallel would collide there.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/package"
cp -r "$1/pyproject.toml" "$1/ropegen" "$work/package/"
"$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation --target "$work/site" \
    "$work/package"
# The binding would load a ROPEGEN_LIBRARY left in the environment instead of this build's library.
PYTHONPATH="$work/site" env -u ROPEGEN_LIBRARY "$python" "$here/$2" "${@:3}"
