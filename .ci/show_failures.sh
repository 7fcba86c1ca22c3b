#!/usr/bin/env bash
# After a failed CI run: what each failed ctest test said, condensed, and every fuzzer finding as
# hex, printed last so that the tail of the CI log carries them (a fuzzer finding depends on the
# run's random seed and is seldom found again elsewhere). Replay a finding with
#     python3 -c 'import sys; open("finding", "wb").write(bytes.fromhex(sys.argv[1]))' HEX
#     ROPEGEN_FUZZ_TRACE=1 build/asan/tests/fuzz/ropegen_fuzz finding
cd "$(dirname "$0")/.."
for failed_list in build/*/Testing/Temporary/LastTestsFailed.log; do
    [ -f "$failed_list" ] || continue
    tree=${failed_list%/Testing/Temporary/LastTestsFailed.log}
    while IFS=: read -r _ test; do
        echo "=== ${tree#build/}: ${test}"
        # The test's output in LastTest.log, its telling lines only.
        awk -v test="$test" '$0 ~ "^[0-9]+/[0-9]+ Test: " test "$" {inside = 1} inside && /^<end of output>/ {exit} inside' \
            "$tree/Testing/Temporary/LastTest.log" |
            grep -E 'CONTRACT VIOLATION|Failure|Expected|Which is|Value of|ERROR|error:|deadly signal|SUMMARY|FATAL|found a problem' |
            tail -n 8 | cut -c1-600
    done < "$failed_list"
done
for finding in build/*/tests/fuzz/fuzz-run/findings/*; do
    [ -f "$finding" ] || continue
    echo "=== fuzzer finding ${finding#build/} ($(stat -c %s "$finding") bytes), hex:"
    od -An -v -tx1 "$finding" | tr -d ' \n'
    echo
done
