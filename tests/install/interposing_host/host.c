/* SPDX-License-Identifier: Apache-2.0 */
/* A host that exports rope_query and rope_dispatch of its own (as if another copy of ropegen were
   linked into it, with -rdynamic as plugin hosts are) loads libropegen.so and builds a cos/sin
   cache with it: the library's own calls must stay inside the library. */
#include <dlfcn.h>
#include <stdio.h>

#include "ropegen/rope.h"

static int g_calls_to_the_host;

rope_status rope_query(const rope_params *params, rope_report *report) {
    (void)params, (void)report;
    g_calls_to_the_host++;
    return ROPE_ERR_INTERNAL;
}

rope_status rope_dispatch(const rope_params *params, rope_report *report) {
    (void)params, (void)report;
    g_calls_to_the_host++;
    return ROPE_ERR_INTERNAL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <libropegen.so>\n", argv[0]);
        return 2;
    }
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    typedef rope_status (*BuildCache)(const rope_cache_spec *, rope_report *);
    BuildCache build = (BuildCache)dlsym(library, "rope_build_cos_sin_cache");
    float cos_table[4 * 32], sin_table[4 * 32];
    rope_cache_spec spec = rope_cache_spec_init();
    spec.source = ROPE_SOURCE_COMPAT;
    spec.rotary_dim = 64;
    spec.cos_cache = cos_table;
    spec.sin_cache = sin_table;
    spec.cache_len = 4;
    rope_report report = rope_report_init();
    const rope_status status = build != NULL ? build(&spec, &report) : ROPE_ERR_INTERNAL;
    printf("rope_build_cos_sin_cache: %d (%s); calls that reached the host's rope_*: %d\n", (int)status, report.message,
           g_calls_to_the_host);
    return status == ROPE_OK && g_calls_to_the_host == 0 && cos_table[0] == 1.0f && sin_table[0] == 0.0f ? 0 : 1;
}
