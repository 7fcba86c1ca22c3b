#!/usr/bin/env bash
# Regenerates the peer benchmarks (bench/peers/*.png, results.md and the peers section of
# bench/README.md) from a built tree:
#   bash bench/peers/run.sh [build dir, default build/release] [peer_bench.py arguments]
# in the Python environment of the tests (tests/python/setup_env.sh), with the binding the build
# staged, pip-installed into a temporary directory as tests/python/run.sh does.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(realpath "${1:-$root/build/release}")"
exec bash "$root/tests/python/run.sh" "$build/python" ../../bench/peers/peer_bench.py "${@:2}"
