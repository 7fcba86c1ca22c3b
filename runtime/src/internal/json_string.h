// SPDX-License-Identifier: Apache-2.0
// JSON string literals for the tools that print JSON (ropegen-info, the tuner's harness).
#pragma once

#include <cstdio>
#include <string>

namespace ropegen {

/// `text` as a JSON string literal: quoted, with quotes and backslashes escaped and control
/// characters as \u00XX.
inline std::string json_string(const std::string &text) {
    std::string out = "\"";
    for (const char c : text) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
            out += escaped;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

}  // namespace ropegen
