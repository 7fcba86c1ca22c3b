# SPDX-License-Identifier: Apache-2.0
# ctest fuzz.RopeDispatch: runs FUZZER for SECONDS on a fresh copy of SEED_DIRS in WORK_DIR (the
# source tree is never written) and fails on any finding, which libFuzzer saves in
# WORK_DIR/findings/ (replay one with: FUZZER <file>). Minimise a finding with
#     FUZZER -minimize_crash=1 -runs=100000 <file>
# and commit it in tests/fuzz/regressions/ with a line in its README.md.
foreach (variable FUZZER SECONDS SEED_DIRS WORK_DIR)
    if (NOT DEFINED ${variable})
        message(FATAL_ERROR "run_fuzzer.cmake: -D ${variable}=... is required")
    endif ()
endforeach ()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/corpus" "${WORK_DIR}/findings")
foreach (directory IN LISTS SEED_DIRS)
    file(COPY "${directory}/" DESTINATION "${WORK_DIR}/corpus" PATTERN "*.md" EXCLUDE)
endforeach ()

# A fixed seed, so that whether CI passes does not depend on chance: every run tries the same
# inputs in the same order (a slower machine fewer of them) and a finding shows again on rerun.
# ROPEGEN_FUZZ_SEED picks another sequence for a search of its own (0: libFuzzer draws one).
set(seed 1)
if (DEFINED ENV{ROPEGEN_FUZZ_SEED})
    set(seed "$ENV{ROPEGEN_FUZZ_SEED}")
endif ()

# Per input: one small call takes milliseconds; 30 s means a hang. 4 GiB leaves room for the
# sanitizers' shadow memory and quarantine; inputs are ~100 bytes, raw values make them longer.
execute_process(
    COMMAND "${FUZZER}" "${WORK_DIR}/corpus" -max_total_time=${SECONDS} -timeout=30 -rss_limit_mb=4096
            -max_len=512 -seed=${seed} -print_final_stats=1 "-artifact_prefix=${WORK_DIR}/findings/"
    RESULT_VARIABLE result)
file(GLOB findings "${WORK_DIR}/findings/*")
if (NOT result EQUAL 0 OR findings)
    message(FATAL_ERROR "the fuzzer found a problem (exit status ${result}); inputs: ${findings}")
endif ()
