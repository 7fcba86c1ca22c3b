# SPDX-License-Identifier: Apache-2.0
# ropegen::warnings: the warning flags of every target of the project (never global flags).
add_library(ropegen_warnings INTERFACE)
add_library(ropegen::warnings ALIAS ropegen_warnings)
target_compile_options(ropegen_warnings INTERFACE -Wall -Wextra $<$<BOOL:${ROPEGEN_WERROR}>:-Werror>)
