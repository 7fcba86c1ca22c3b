# SPDX-License-Identifier: Apache-2.0
# Finds Halide (the pinned PyPI wheel in the project's .venv, made by cmake/setup.sh, unless the
# caller points Halide_DIR elsewhere) and the Python that runs cmake/ropegen_kernels.py.
set(ropegen_venv_python "${PROJECT_SOURCE_DIR}/.venv/bin/python")
if (NOT Halide_DIR AND EXISTS "${ropegen_venv_python}")
    execute_process(
        COMMAND "${ropegen_venv_python}" -c "import halide; print(halide.install_dir())"
        OUTPUT_VARIABLE ropegen_halide_root OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE ropegen_halide_found)
    if (ropegen_halide_found EQUAL 0)
        set(Halide_DIR "${ropegen_halide_root}/lib64/cmake/Halide" CACHE PATH "Halide CMake package" FORCE)
    endif ()
endif ()
# Its helpers sit beside it; said explicitly because a cross toolchain confines package searches
# to the target's sysroot.
if (Halide_DIR AND NOT EXISTS "${HalideHelpers_DIR}/HalideHelpersConfig.cmake")
    set(HalideHelpers_DIR "${Halide_DIR}/../HalideHelpers")
endif ()
find_package(Halide 21 REQUIRED)

if (EXISTS "${ropegen_venv_python}")
    set(ROPEGEN_PYTHON "${ropegen_venv_python}" CACHE FILEPATH "Python that runs the build's scripts")
else ()
    find_package(Python3 REQUIRED COMPONENTS Interpreter)
    set(ROPEGEN_PYTHON "${Python3_EXECUTABLE}" CACHE FILEPATH "Python that runs the build's scripts")
endif ()

# ropegen_add_kernel(<name> <kernel> [<knob>=<value>...] [ASSEMBLY <var>] [DEVICE_CODE <var>]
#                    [TARGET <halide target>] [RUNTIME <runtime target>]):
# the Halide library and function <name> of <kernel> of kernels.cmake (its target, features,
# schedule knobs and generator: ropegen_rope unless it names another), with the knobs given
# changed, for another Halide target (with its own runtime) when given; <var>, when given,
# receives the path of its assembly or device code.
function(ropegen_add_kernel name kernel)
    cmake_parse_arguments(PARSE_ARGV 2 arg "" "ASSEMBLY;DEVICE_CODE;TARGET;RUNTIME" "")
    if (NOT arg_TARGET)
        set(arg_TARGET ${ROPEGEN_KERNEL_${kernel}_TARGET})
    endif ()
    if (NOT arg_RUNTIME)
        set(arg_RUNTIME ropegen_halide_runtime)
    endif ()
    set(params ${ROPEGEN_KERNEL_${kernel}_PARAMS})
    set(generator ropegen_rope)
    if (ROPEGEN_KERNEL_${kernel}_GENERATOR)
        set(generator ${ROPEGEN_KERNEL_${kernel}_GENERATOR})
    endif ()
    foreach (override IN LISTS arg_UNPARSED_ARGUMENTS)
        string(REGEX REPLACE "=.*" "" knob "${override}")
        list(FILTER params EXCLUDE REGEX "^${knob}=")
        list(APPEND params "${override}")
    endforeach ()
    set(extra_outputs "")
    foreach (output IN ITEMS ASSEMBLY DEVICE_CODE)
        if (arg_${output})
            list(APPEND extra_outputs ${output} ${arg_${output}})
        endif ()
    endforeach ()
    add_halide_library(
        ${name} FROM ropegen_generator
        GENERATOR ${generator}
        FUNCTION_NAME ${name}
        TARGETS ${arg_TARGET}
        FEATURES ${ROPEGEN_KERNEL_${kernel}_FEATURES}
        PARAMS ${params}
        USE_RUNTIME ${arg_RUNTIME}
        ${extra_outputs})
    foreach (output IN ITEMS ASSEMBLY DEVICE_CODE)
        if (arg_${output})
            set(${arg_${output}} "${${arg_${output}}}" PARENT_SCOPE)
        endif ()
    endforeach ()
endfunction()
