// SPDX-License-Identifier: Apache-2.0
// The fuzzer's committed inputs as regression tests of the normal suite, in every build (no
// libFuzzer needed): each file of tests/fuzz/corpus and tests/fuzz/regressions goes through the
// harness once, as its own test. A contract violation prints the call and traps, which fails the
// test; so do a guard-page fault and, in sanitizer builds, any sanitizer report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

namespace fs = std::filesystem;

/// Inputs, sorted: every regular file of the two directories except notes (*.md).
std::vector<fs::path> fuzz_inputs() {
    std::vector<fs::path> inputs;
    for (const char *directory : {ROPEGEN_FUZZ_CORPUS_DIR, ROPEGEN_FUZZ_REGRESSIONS_DIR}) {
        for (const fs::directory_entry &entry : fs::directory_iterator(directory)) {
            if (entry.is_regular_file() && entry.path().extension() != ".md") {
                inputs.push_back(entry.path());
            }
        }
    }
    std::sort(inputs.begin(), inputs.end());
    return inputs;
}

/// "corpus_valid_half_cache_f32_separate_bshd_d64": the directory and the file name.
std::string test_name(const fs::path &input) {
    std::string name = input.parent_path().filename().string() + "_" + input.filename().string();
    std::replace_if(name.begin(), name.end(), [](unsigned char c) { return !std::isalnum(c); }, '_');
    return name;
}

class FuzzInput : public ::testing::TestWithParam<fs::path> {};

TEST_P(FuzzInput, KeepsTheContract) {
    std::ifstream file(GetParam(), std::ios::binary);
    ASSERT_TRUE(file) << "cannot read " << GetParam();
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Replay, FuzzInput, ::testing::ValuesIn(fuzz_inputs()),
                         [](const ::testing::TestParamInfo<fs::path> &info) { return test_name(info.param); });

}  // namespace
