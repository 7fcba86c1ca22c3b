/* SPDX-License-Identifier: Apache-2.0 */
/* rope_set_max_isa() with any int, the way a C caller can pass one: C++ cannot hold an enum value
 * outside its enumerators' range without undefined behaviour (UBSan's -fsanitize=enum traps). */
#include <stdint.h>

#include "ropegen/rope.h"

rope_status ropegen_fuzz_set_max_isa(int32_t isa);

rope_status ropegen_fuzz_set_max_isa(int32_t isa) {
    return rope_set_max_isa((rope_isa)isa);
}
