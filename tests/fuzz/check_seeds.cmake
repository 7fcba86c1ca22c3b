# SPDX-License-Identifier: Apache-2.0
# ctest fuzz.SeedCorpusUpToDate: the committed seed corpus (COMMITTED) is exactly what SEED_WRITER
# writes, so that a change of the input format cannot leave stale seeds behind.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
execute_process(COMMAND ${SEED_WRITER} "${WORK_DIR}" RESULT_VARIABLE result)  # a list: [emulator...] program
if (NOT result EQUAL 0)
    message(FATAL_ERROR "the seed writer (${SEED_WRITER}) failed")
endif ()
file(GLOB written RELATIVE "${WORK_DIR}" "${WORK_DIR}/*")
file(GLOB committed RELATIVE "${COMMITTED}" "${COMMITTED}/*")
set(stale "")
foreach (name IN LISTS written committed)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${WORK_DIR}/${name}" "${COMMITTED}/${name}"
                    RESULT_VARIABLE differs OUTPUT_QUIET ERROR_QUIET)
    if (differs)
        list(APPEND stale "${name}")
    endif ()
endforeach ()
if (stale)
    list(REMOVE_DUPLICATES stale)
    list(JOIN SEED_WRITER " " seed_writer_command)
    message(FATAL_ERROR "tests/fuzz/corpus differs from what the seed writer writes (${stale}); regenerate it: "
                        "rm tests/fuzz/corpus/* && ${seed_writer_command} tests/fuzz/corpus")
endif ()
