#!/usr/bin/env bash
# Runs one Python test script of this directory with the binding staged by the build:
#   run.sh <build>/python <script.py>
# in the cached environment of setup_env.sh (built on first use: several GB, minutes).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="$(bash "$here/setup_env.sh" "${ROPEGEN_BASE_PYTHON:-python3}")"
export PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" "$here/$2"
