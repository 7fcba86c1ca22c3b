#!/usr/bin/env bash
# Installs everything the build needs into project-local folders, idempotently:
#   - Debian packages via apt-get, only when missing: compilers, GoogleTest, Google Benchmark, and
#     for the hardening jobs clang with its sanitizer and libFuzzer runtimes, llvm (symbolizer) and
#     qemu-user (the foreign-CPU runs and the aarch64 suite); the aarch64 cross compilers and
#     GoogleTest's sources (built for aarch64 by the cross build); PoCL, an OpenCL implementation
#     on the CPU, which runs the GPU schedule where there is no GPU;
#   - a Python virtual environment in .venv with pinned halide, cmake, ninja and (x86-64) ptxas
#     from PyPI.
# A second run only checks and returns in seconds.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ROPEGEN_VENV:-$root/.venv}"
requirements="$root/cmake/requirements.txt"

debian_packages=(g++ python3 python3-venv libgtest-dev libgmock-dev libbenchmark-dev
                 clang libclang-rt-14-dev llvm qemu-user
                 g++-aarch64-linux-gnu googletest pocl-opencl-icd ocl-icd-libopencl1)
missing=()
for pkg in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

stamp="$venv/.ropegen-requirements"
if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating $venv"
    python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp"; then
    echo "setup: installing pinned Python packages into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$stamp"
fi
