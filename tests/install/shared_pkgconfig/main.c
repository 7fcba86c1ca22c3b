/* SPDX-License-Identifier: Apache-2.0 */
/* A C program built with `pkg-config --cflags --libs ropegen` against the shared library: the
   header's version must be the library's, and an in-place NeoX (half) rotation of q alone from an
   f32 cos/sin cache must match the rotation computed in double from the same tables. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <ropegen/rope.h>
#include <ropegen/version.h>

enum { TOKENS = 5, HEADS = 3, HEAD_DIM = 128, PAIRS = HEAD_DIM / 2, CACHE_LEN = 64 };

int main(void) {
    if (strcmp(rope_version_string(), ROPEGEN_VERSION_STRING) != 0 || rope_abi_version() != ROPE_ABI_VERSION) {
        fprintf(stderr, "header %s (ABI %d), library %s (ABI %u)\n", ROPEGEN_VERSION_STRING, ROPE_ABI_VERSION,
                rope_version_string(), rope_abi_version());
        return 1;
    }
    static float cos_cache[CACHE_LEN][PAIRS], sin_cache[CACHE_LEN][PAIRS], q[TOKENS][HEADS][HEAD_DIM],
        x[TOKENS][HEADS][HEAD_DIM];
    static const int32_t positions[TOKENS] = {0, 1, 17, 40, 63};
    for (int m = 0; m < CACHE_LEN; m++) {
        for (int i = 0; i < PAIRS; i++) {
            const double angle = m * pow(500000.0, -2.0 * i / HEAD_DIM);
            cos_cache[m][i] = (float)cos(angle), sin_cache[m][i] = (float)sin(angle);
        }
    }
    for (int t = 0; t < TOKENS; t++)
        for (int h = 0; h < HEADS; h++)
            for (int d = 0; d < HEAD_DIM; d++) x[t][h][d] = q[t][h][d] = (float)((t * 31 + h * 7 + d) % 17) / 8.0f - 1.0f;

    rope_params params = rope_params_init();
    const rope_tensor view = {q, ROPE_DTYPE_F32, {1, TOKENS, HEADS, HEAD_DIM},
                              {TOKENS * HEADS * HEAD_DIM, HEADS * HEAD_DIM, HEAD_DIM, 1}};
    params.q = params.q_out = view; /* in place */
    params.positions.kind = ROPE_POSITIONS_TABLE;
    params.positions.index_type = ROPE_INDEX_INT32;
    params.positions.data = positions;
    params.positions.strides[0] = TOKENS, params.positions.strides[1] = 1;
    params.angles.source = ROPE_SOURCE_CACHE;
    params.angles.cos_cache = cos_cache, params.angles.sin_cache = sin_cache;
    params.angles.cache_len = CACHE_LEN;
    rope_report report = rope_report_init();
    if (rope_query(&params, &report) != ROPE_OK || rope_dispatch(&params, &report) != ROPE_OK) {
        fprintf(stderr, "%s\n", report.message);
        return 1;
    }
    double worst = 0;
    for (int t = 0; t < TOKENS; t++) {
        for (int h = 0; h < HEADS; h++) {
            for (int i = 0; i < PAIRS; i++) {
                const double c = cos_cache[positions[t]][i], s = sin_cache[positions[t]][i];
                const double a = x[t][h][i], b = x[t][h][i + PAIRS];
                worst = fmax(worst, fabs(q[t][h][i] - (a * c - b * s)));
                worst = fmax(worst, fabs(q[t][h][i + PAIRS] - (b * c + a * s)));
            }
        }
    }
    printf("libropegen.so %s, kernel %s, max |error| %.3g\n", rope_version_string(), report.kernel, worst);
    return worst < 1e-6 ? 0 : 1;
}
