# SPDX-License-Identifier: Apache-2.0
# ropegen_import_kernels(<tree>): the kernels of this build (ROPEGEN_KERNELS, ROPEGEN_CUDA_KERNELS,
# ROPEGEN_PIPELINES)
# and their Halide runtime as imported libraries made from another build tree of the same sources,
# in place of generating them again (ROPEGEN_KERNELS_FROM; the sanitizer presets take release's).
# Halide's machine code is the same in every build of a target and the sanitizers never
# instrument it, so this only saves the generation time. Every kernel must have the same Halide
# target, features and schedule there as here, or configuring fails (after a schedule edit,
# configure that tree first). Building brings that tree's kernels up to date, so a generator edit
# reaches both, and copies them into this tree: cleaning this tree never deletes that tree's files.
# Several trees may import from one: each builds and copies while holding a lock on that tree,
# since two builds of one tree at once race on its files.

# Script mode, the import's build step: -D TREE=<tree> -D TARGETS=<targets> -D COPIES=<folder>
# -D FILES=<files of TREE/runtime to copy there>, lists comma-separated.
if (CMAKE_SCRIPT_MODE_FILE)
    file(LOCK "${TREE}/ropegen-import.lock" GUARD PROCESS)  # released when this process ends
    string(REPLACE "," ";" targets "${TARGETS}")
    execute_process(COMMAND "${CMAKE_COMMAND}" --build "${TREE}" --target ${targets} COMMAND_ERROR_IS_FATAL ANY)
    string(REPLACE "," ";" files "${FILES}")
    foreach (name IN LISTS files)
        file(COPY_FILE "${TREE}/runtime/${name}" "${COPIES}/${name}" ONLY_IF_DIFFERENT)
    endforeach ()
    return()
endif ()

# One line per kernel (and one for the runtime) of what generating it takes, as kernels.cmake
# defines it in the calling scope.
function(ropegen_kernel_definitions out)
    set(definitions "runtime ${ROPEGEN_HALIDE_RUNTIME_TARGET}")
    foreach (kernel IN LISTS ARGN)
        string(REPLACE ";" "," definition
                       "${kernel} ${ROPEGEN_KERNEL_${kernel}_TARGET} ${ROPEGEN_KERNEL_${kernel}_FEATURES} ${ROPEGEN_KERNEL_${kernel}_PARAMS} ${ROPEGEN_KERNEL_${kernel}_GENERATOR}")
        list(APPEND definitions "${definition}")
    endforeach ()
    set(${out} "${definitions}" PARENT_SCOPE)
endfunction()

function(ropegen_import_kernels tree)
    if (tree STREQUAL CMAKE_BINARY_DIR)
        message(FATAL_ERROR "ROPEGEN_KERNELS_FROM=${tree} is this build tree; name another, or leave it empty")
    endif ()
    set(other_list "${tree}/runtime/kernels.cmake")
    if (NOT EXISTS "${other_list}")
        message(FATAL_ERROR "ROPEGEN_KERNELS_FROM=${tree}: no kernel list at ${other_list}; configure that build first "
                            "(the sanitizer presets take release's: cmake --preset release)")
    endif ()
    set(kernels ${ROPEGEN_KERNELS} ${ROPEGEN_CUDA_KERNELS} ${ROPEGEN_PIPELINES})
    ropegen_kernel_definitions(here ${kernels})
    include("${other_list}")  # the other tree's definitions, in this function's scope only
    ropegen_kernel_definitions(there ${kernels})
    foreach (mine theirs IN ZIP_LISTS here there)
        if (NOT mine STREQUAL theirs)
            string(REGEX REPLACE " .*" "" name "${mine}")
            message(FATAL_ERROR "ROPEGEN_KERNELS_FROM=${tree}: ${name} differs there (reconfigure that build, or leave "
                                "ROPEGEN_KERNELS_FROM empty to generate the kernels here)\n  here:  ${mine}\n  there: ${theirs}")
        endif ()
    endforeach ()

    set(copies "${CMAKE_CURRENT_BINARY_DIR}/imported")
    file(MAKE_DIRECTORY "${copies}")  # an imported target's include directory must exist to generate
    set(files libropegen_halide_runtime.a)
    foreach (kernel IN LISTS kernels)
        list(APPEND files lib${kernel}.a ${kernel}.h)
    endforeach ()
    list(TRANSFORM files PREPEND "${copies}/" OUTPUT_VARIABLE byproducts)
    string(REPLACE ";" "," file_list "${files}")
    string(REPLACE ";" "," targets "ropegen_halide_runtime;${kernels}")
    add_custom_target(
        ropegen_imported_kernels
        COMMAND "${CMAKE_COMMAND}" -D "TREE=${tree}" -D "TARGETS=${targets}" -D "COPIES=${copies}"
                -D "FILES=${file_list}" -P "${CMAKE_CURRENT_FUNCTION_LIST_FILE}"
        BYPRODUCTS ${byproducts}
        COMMENT "Bringing the kernels of ${tree} up to date"
        VERBATIM)

    find_package(Threads REQUIRED)
    add_library(ropegen_halide_runtime STATIC IMPORTED GLOBAL)
    set_target_properties(ropegen_halide_runtime PROPERTIES IMPORTED_LOCATION "${copies}/libropegen_halide_runtime.a")
    target_link_libraries(ropegen_halide_runtime INTERFACE Halide::Runtime Threads::Threads ${CMAKE_DL_LIBS})
    add_dependencies(ropegen_halide_runtime ropegen_imported_kernels)
    foreach (kernel IN LISTS kernels)
        add_library(${kernel} STATIC IMPORTED GLOBAL)
        set_target_properties(${kernel} PROPERTIES IMPORTED_LOCATION "${copies}/lib${kernel}.a"
                                                   INTERFACE_INCLUDE_DIRECTORIES "${copies}")
        target_link_libraries(${kernel} INTERFACE ropegen_halide_runtime)
        add_dependencies(${kernel} ropegen_imported_kernels)
        # Read in place by the PTX and assembly checks, as add_halide_library names them.
        if (kernel IN_LIST ROPEGEN_CUDA_KERNELS)
            set(${kernel}_ptx "${tree}/runtime/${kernel}.device_code" PARENT_SCOPE)
        elseif (ROPEGEN_ARCH STREQUAL "aarch64" AND kernel IN_LIST ROPEGEN_KERNELS)
            set(${kernel}_assembly "${tree}/runtime/${kernel}.s" PARENT_SCOPE)
        endif ()
    endforeach ()
endfunction()
