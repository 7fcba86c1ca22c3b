// SPDX-License-Identifier: Apache-2.0
// Enum fields and arguments of the C ABI as the ints they are. A C caller may store any int in
// them; C++ may not load an enum outside its enumerators' range (UBSan's -fsanitize=enum traps),
// so the library, and the tests that pass such values, read and write them through these.
#pragma once

#include <cstdint>
#include <cstring>

namespace ropegen {

template <typename Enum>
int32_t enum_value(const Enum &field) {
    static_assert(sizeof(Enum) == sizeof(int32_t), "C enums of this ABI are int-sized");
    int32_t value;
    std::memcpy(&value, &field, sizeof(value));
    return value;
}

template <typename Enum>
void store_raw(Enum &field, int32_t value) {
    static_assert(sizeof(Enum) == sizeof(int32_t), "C enums of this ABI are int-sized");
    std::memcpy(&field, &value, sizeof(value));
}

}  // namespace ropegen
