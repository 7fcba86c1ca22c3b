/* SPDX-License-Identifier: Apache-2.0 */
/* libropegen.so is libropegen.a linked whole (runtime/CMakeLists.txt); this unit only checks that
   the public header compiles as plain C in the library's own build. */
#include "ropegen/rope.h"
