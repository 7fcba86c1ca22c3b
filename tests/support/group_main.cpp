// SPDX-License-Identifier: Apache-2.0
// main() of the GoogleTest programs that ctest runs once per group of tests (one kernel's tests,
// selected by --gtest_filter) rather than once per test: under qemu and the sanitizers starting a
// process costs more than most tests. ctest sees one exit status per group, so with --whole_group
// the status speaks for the group: ROPEGEN_GROUP_SKIPPED (the test's SKIP_RETURN_CODE) when every
// selected test skipped, a failure when only some did (a skip must not hide inside a pass) or when
// the filter selected nothing. Without --whole_group it is GoogleTest's own main, but for
// refusing arguments it does not know (a mistyped --whole_group would otherwise be ignored).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

int main(int argc, char **argv) {
    testing::InitGoogleTest(&argc, argv);
    bool whole_group = false;
    for (int i = 1; i < argc; i++) {
        if (std::strcmp(argv[i], "--whole_group") == 0) {
            whole_group = true;
        } else {
            std::fprintf(stderr, "unknown argument: %s\n", argv[i]);
            return 2;
        }
    }
    const int status = RUN_ALL_TESTS();
    if (!whole_group || status != 0) {
        return status;
    }
    const testing::UnitTest &run = *testing::UnitTest::GetInstance();
    const int selected = run.test_to_run_count();
    const int skipped = run.skipped_test_count();
    if (selected == 0) {
        std::fprintf(stderr, "--whole_group: the filter selected no test\n");
        return 1;
    }
    if (skipped == selected) {
        return ROPEGEN_GROUP_SKIPPED;
    }
    if (skipped > 0) {
        std::fprintf(stderr, "--whole_group: %d of %d tests skipped; a group is skipped whole or not at all\n",
                     skipped, selected);
        return 1;
    }
    return 0;
}
