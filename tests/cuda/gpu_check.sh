#!/bin/bash
# The GPU checks of a release build, for a machine with a CUDA GPU that has the two binaries but
# not the build tree (a lent machine; carry build/release/tests/cuda/ropegen_cuda_test,
# build/release/bench/rope_cuda_bench and, where the machine lacks it, Debian's
# libbenchmark.so.1debian on LD_LIBRARY_PATH). Writes its logs and the bench JSON to OUT_DIR
# (default gpu_check/) and prints a summary: the CUDA tests against the fp64 oracle, memcheck and
# racecheck on a sample of kernels (when compute-sanitizer is there), then rope_cuda_bench.
# Usage: tests/cuda/gpu_check.sh [BUILD_DIR] [OUT_DIR]
set -u
build=${1:-build/release}
out=${2:-gpu_check}
mkdir -p "$out"
tests=$build/tests/cuda/ropegen_cuda_test
bench=$build/bench/rope_cuda_bench
start=$(date +%s)
stamp() { echo "== $1: exit $2, at +$(( $(date +%s) - start )) s"; }

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 300 "$tests" --gtest_output="xml:$out/cuda_test.xml" > "$out/cuda_test.log" 2>&1
stamp "CUDA tests ($out/cuda_test.log)" $?
grep -E "^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?" "$out/cuda_test.log"
grep -A6 "Failure" "$out/cuda_test.log" | cut -c1-220 | head -40

if command -v compute-sanitizer > /dev/null; then
    # Not the 70000-sequence batch test (65535 blocks under a sanitizer could outlast the limit),
    # nor the two that run a child process, one of which takes all free device memory first (the
    # sanitizer stalls on them): they run in the suite above.
    sample='CudaDispatch.*:CudaKernels/*half_cache_d128_bf16__cuda_sm86:CudaKernels/*interleaved_precise_dany_f32__cuda_sm86'
    sample+=':CudaKernels/*interleaved_cache_dany_f16__cuda_sm86'
    sample+='-CudaDispatch.ABatchBeyondOneGridRunsInParts:CudaDispatch.AModuleThatCannotLoadIsAStatusNotAnAbort'
    sample+=':CudaDispatch.APointerOfAnotherContextIsRejected'
    # Three driver calls fail on purpose, and memcheck reports each as an error: cuMemGetAddressRange
    # on the host-pointer test's pointer (CUDA_ERROR_NOT_FOUND), and cuMemRetainAllocationHandle on
    # the cuMemAlloc buffer that each of the two views-past-their-allocation tests overruns
    # (CUDA_ERROR_INVALID_VALUE: not a VMM chunk, so the view may not run on into the next one).
    timeout 120 compute-sanitizer --tool memcheck "$tests" --gtest_filter="$sample" > "$out/memcheck.log" 2>&1
    stamp "memcheck ($out/memcheck.log)" $?
    grep -E "ERROR SUMMARY" "$out/memcheck.log"
    timeout 120 compute-sanitizer --tool racecheck "$tests" --gtest_filter="$sample" > "$out/racecheck.log" 2>&1
    stamp "racecheck ($out/racecheck.log)" $?
    grep -E "RACECHECK SUMMARY" "$out/racecheck.log"
fi

timeout 300 "$bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_format=json --benchmark_out="$out/cuda_bench.json" > "$out/cuda_bench.txt" 2>&1
stamp "rope_cuda_bench ($out/cuda_bench.json)" $?
grep -E "^#|rope_cuda_bench:" "$out/cuda_bench.txt" | cut -c1-250
