#!/usr/bin/env bash
# Builds (once) the Python environment of the transformers tests and prints its interpreter.
# It lives in a cache outside the clone, keyed by the pinned requirements and the Python version,
# because torch alone is several GB: ${ROPEGEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ropegen}.
# A fresh machine builds it from scratch; a second run only checks and returns at once.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
requirements="$here/requirements.txt"
python="${1:-python3}"
key="$( (cat "$requirements"; "$python" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)"
cache="${ROPEGEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ropegen}"
env_dir="$cache/pytest-$key"

mkdir -p "$cache"
exec 9>"$cache/.pytest-$key.lock"
flock 9  # tests running in parallel wait for the one that builds it
if [ ! -f "$env_dir/.complete" ]; then
    echo "setup_env: building $env_dir (torch is several GB; once per pin set)" >&2
    rm -rf "$env_dir"
    "$python" -m venv "$env_dir"
    "$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir -r "$requirements" >&2
    touch "$env_dir/.complete"
    # Environments of other pin sets are several GB each: only the current one is kept, less one
    # that another checkout is building now (it holds that one's lock; lock files stay, as a
    # process waiting on a removed one would build beside a new one).
    for other in "$cache"/pytest-*; do
        [ -d "$other" ] && [ "$other" != "$env_dir" ] || continue
        (flock -n 8 && rm -rf "$other") 8>"$cache/.${other##*/}.lock" || true
    done
fi
echo "$env_dir/bin/python"
