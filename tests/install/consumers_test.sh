#!/usr/bin/env bash
# The installed package as engines use it (ctest install.Consumers):
#   consumers_test.sh <build dir> <source dir> <cmake> <Halide_DIR>
# installs <build dir> into a fresh prefix, checks what the libraries export, then builds and
# runs out-of-tree consumers against the prefix: README.md's C example and a C++ engine
# (find_package, static), a C program (pkg-config, shared), a host exporting rope_* of its own that
# loads libropegen.so, and an engine with its own Halide pipeline (find_package, static: two Halide
# runtimes in one binary). Any failure fails the test.
set -euo pipefail
build="$(realpath "$1")" source_dir="$(realpath "$2")" cmake="$3" halide_dir="$4"
here="$source_dir/tests/install"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
"$cmake" --install "$build" --prefix "$prefix" > /dev/null
libdir="$prefix/lib"

# Only rope_* may be global: in the archive, and in the shared library's static and dynamic tables.
foreach_global() {  # nm options...: prints "what: symbol" for every defined global not rope_*
    nm "$@" | awk -v what="nm $*" 'NF == 3 && $3 !~ /^rope_/ { print what ": " $3 }'
}
leaks="$(foreach_global -g --defined-only "$libdir/libropegen.a"; foreach_global -g --defined-only "$libdir/libropegen.so"
         foreach_global -D --defined-only "$libdir/libropegen.so")"
if [ -n "$leaks" ]; then
    echo "symbols other than rope_* are global:"; echo "$leaks" | head -20; exit 1
fi
echo "exports: only rope_* ($(nm -D --defined-only "$libdir/libropegen.so" | wc -l) in libropegen.so)"
soname="$(readelf -d "$libdir/libropegen.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
[ "$soname" = "libropegen.so.1" ] || { echo "SONAME is '$soname', not libropegen.so.1"; exit 1; }

run_cmake_consumer() {  # name, extra configure arguments...
    local name="$1"; shift
    echo "--- $name (find_package, static)"
    "$cmake" -S "$here/$name" -B "$work/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
        "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
    "$cmake" --build "$work/$name" > "$work/$name.build.log" 2>&1 || { cat "$work/$name.build.log"; exit 1; }
}

# README.md's example, exactly as the README shows it.
awk '/^<!-- example: c-abi -->$/ { armed = 1; next } armed && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit } inside { print }' "$source_dir/README.md" > "$work/readme_example.c"
[ -s "$work/readme_example.c" ] || { echo "README.md has no '<!-- example: c-abi -->' C block"; exit 1; }
run_cmake_consumer readme_example -DEXAMPLE_SOURCE="$work/readme_example.c"
"$work/readme_example/readme_example"

run_cmake_consumer cpp_static
"$work/cpp_static/cpp_consumer"

echo "--- shared_pkgconfig (pkg-config, shared)"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046  # pkg-config's flags are words
cc -std=c99 -Wall -Wextra -Werror $(pkg-config --cflags ropegen) "$here/shared_pkgconfig/main.c" \
    $(pkg-config --libs ropegen) -lm -Wl,-rpath,"$(pkg-config --variable=libdir ropegen)" -o "$work/shared_consumer"
readelf -d "$work/shared_consumer" | grep -q 'NEEDED.*\[libropegen.so.1\]' || { echo "not linked to libropegen.so.1"; exit 1; }
"$work/shared_consumer"

echo "--- interposing_host (dlopen of libropegen.so by a host exporting rope_* of its own)"
cc -std=c99 -Wall -Wextra -Werror -I"$prefix/include" "$here/interposing_host/host.c" -rdynamic -ldl \
    -o "$work/interposing_host"
"$work/interposing_host" "$libdir/libropegen.so.1"

run_cmake_consumer halide_pipeline -DHalide_DIR="$halide_dir" -DHalideHelpers_DIR="$halide_dir/../HalideHelpers"
"$work/halide_pipeline/halide_consumer"
# Both runtimes are in the binary: the engine's global (weak, as Halide makes it), ropegen's local.
kinds="$(nm "$work/halide_pipeline/halide_consumer" | awk '$3 == "halide_malloc" { print $2 }' | sort | tr -d '\n')"
[ "$kinds" = "Wt" ] || { echo "halide_malloc kinds '$kinds', expected W (the engine's) and t (ropegen's)"; exit 1; }
echo "--- bin/ropegen-info --json"
"$prefix/bin/ropegen-info" --json --kernels | python3 -c '
import json, sys
info = json.load(sys.stdin)
call = info["call"]
assert call["status"].startswith("ROPE_OK") and call["kernel"] == call["chosen_kernel"]["name"], call
assert info["kernels"]["cpu"] == sum("isa" in k for k in info["kernels"]["list"]) > 0, info["kernels"]["cpu"]
assert info["cpu"]["best_isa"] in info["kernels"]["isa_levels"], info["cpu"]
assert all(s["default_file"].startswith("schedules/") for s in info["schedules"]), info["schedules"]
print("ropegen-info: cpu", info["cpu"]["best_isa"], "| decode bf16 ->", call["kernel"])'
for in_place in 0 1; do
    "$prefix/bin/ropegen-info" --json --call "style=interleaved,dtype=f32,in_place=$in_place" | IN_PLACE=$in_place python3 -c '
import json, os, sys
call = json.load(sys.stdin)["call"]
in_place = os.environ["IN_PLACE"] == "1"
assert call["status"].startswith("ROPE_OK") and call["shape"]["in_place"] == str(int(in_place)), call
# An in-place kernel serves exactly the calls in place: never chosen out of place, never passed over in place.
assert in_place or "_inplace__" not in call["kernel"], call["kernel"]
passed_over = [c["kernel"] for c in call["candidates"] if c["why"].startswith("passed over: for calls in place")]
assert not (in_place and passed_over), passed_over
print("ropegen-info: decode f32 interleaved, in_place=%d ->" % in_place, call["kernel"])'
done
echo "all consumers ran"
