/* SPDX-License-Identifier: Apache-2.0 */
/* The demo an engine would write: link libropegen.a, call rope_dispatch() on a Llama-3-8B-like
 * layer (32 q heads, 8 kv heads, head_dim 128) for a 4096-token prefill and a batch-8 decode
 * step (the decode step also as a plan, made once and run at every step), and print the kernel
 * chosen, the max error against an fp64 reference and GB/s. */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ropegen/rope.h>

enum { HEAD_DIM = 128, Q_HEADS = 32, KV_HEADS = 8, PAIRS = HEAD_DIM / 2, CACHE_LEN = 8192, REPEATS = 20 };

typedef struct {
    const char *name;
    int batch, seq;
    rope_source source;
    int64_t first_position; /* decode: each batch item at its own position */
    int planned;            /* made once as a plan (rope_plan_create), run at every step (rope_plan_run) */
} Scenario;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

static rope_tensor bshd(float *data, int batch, int seq, int heads) {
    rope_tensor t;
    memset(&t, 0, sizeof(t));
    t.data = data;
    t.dtype = ROPE_DTYPE_F32;
    t.sizes[0] = batch, t.sizes[1] = seq, t.sizes[2] = heads, t.sizes[3] = HEAD_DIM;
    t.strides[3] = 1, t.strides[2] = HEAD_DIM, t.strides[1] = (int64_t)heads * HEAD_DIM;
    t.strides[0] = (int64_t)seq * heads * HEAD_DIM;
    return t;
}

/* fp64 reference for the half style: y[i] = x[i] c - x[i+P] s, y[i+P] = x[i+P] c + x[i] s. The
   largest error of a pair over max(|x[i]|, |x[i+P]|), spec §7's bound being relative to the pair;
   a NaN is an infinite error (fmax and comparisons would pass over it). */
static double max_error(const float *x, const float *y, const int64_t *positions, int tokens, int heads,
                        const float *cos_cache, const float *sin_cache, rope_source source) {
    double worst = 0.0;
    for (int t = 0; t < tokens; t++) {
        for (int h = 0; h < heads; h++) {
            const float *xi = x + ((size_t)t * heads + h) * HEAD_DIM;
            const float *yi = y + ((size_t)t * heads + h) * HEAD_DIM;
            for (int i = 0; i < PAIRS; i++) {
                double c, s;
                if (source == ROPE_SOURCE_CACHE) {
                    c = cos_cache[positions[t] * PAIRS + i], s = sin_cache[positions[t] * PAIRS + i];
                } else { /* compat (spec §5): transformers' float32 frequency and angle */
                    const float exponent = (float)(2 * i) / (float)HEAD_DIM;
                    const float inv_freq = 1.0f / (float)pow(10000.0, (double)exponent);
                    const float angle = (float)positions[t] * inv_freq;
                    c = cos((double)angle), s = sin((double)angle);
                }
                const double a = xi[i], b = xi[i + PAIRS];
                const double ya = a * c - b * s, yb = b * c + a * s;
                const double ea = fabs(yi[i] - ya), eb = fabs(yi[i + PAIRS] - yb), scale = fmax(fabs(a), fabs(b));
                if (isnan(ea) || isnan(eb)) {
                    return INFINITY;
                }
                const double e = (ea > eb ? ea : eb) / (scale > 0 ? scale : 1.0);
                worst = e > worst ? e : worst;
            }
        }
    }
    return worst;
}

static int run(const Scenario *sc, const float *cos_cache, const float *sin_cache) {
    const int tokens = sc->batch * sc->seq;
    const size_t q_elems = (size_t)tokens * Q_HEADS * HEAD_DIM, k_elems = (size_t)tokens * KV_HEADS * HEAD_DIM;
    float *q = malloc(q_elems * sizeof(float)), *k = malloc(k_elems * sizeof(float));
    float *q_out = malloc(q_elems * sizeof(float)), *k_out = malloc(k_elems * sizeof(float));
    int64_t *positions = malloc((size_t)tokens * sizeof(int64_t));
    if (!q || !k || !q_out || !k_out || !positions) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    fill(q, q_elems, 1), fill(k, k_elems, 2);
    for (int b = 0; b < sc->batch; b++) {
        for (int s = 0; s < sc->seq; s++) {
            positions[b * sc->seq + s] = sc->first_position + 37 * b + s; /* decode: ragged lengths */
        }
    }

    rope_params p = rope_params_init();
    p.style = ROPE_STYLE_HALF;
    p.q = bshd(q, sc->batch, sc->seq, Q_HEADS), p.k = bshd(k, sc->batch, sc->seq, KV_HEADS);
    p.q_out = bshd(q_out, sc->batch, sc->seq, Q_HEADS), p.k_out = bshd(k_out, sc->batch, sc->seq, KV_HEADS);
    p.positions.kind = ROPE_POSITIONS_TABLE;
    p.positions.index_type = ROPE_INDEX_INT64;
    p.positions.data = positions;
    p.positions.strides[0] = sc->seq, p.positions.strides[1] = 1;
    p.angles.source = sc->source;
    p.angles.cos_cache = cos_cache, p.angles.sin_cache = sin_cache, p.angles.cache_len = CACHE_LEN;

    rope_report report = rope_report_init();
    rope_plan *plan = NULL;
    if (sc->planned && rope_plan_create(&p, &plan, &report) != ROPE_OK) {
        fprintf(stderr, "%s: rope_plan_create failed: %s\n", sc->name, report.message);
        return 1;
    }
    double best = 1e30;
    for (int r = 0; r < REPEATS; r++) {
        const double start = now_seconds();
        const rope_status status = plan ? rope_plan_run(plan, &report) : rope_dispatch(&p, &report);
        const double elapsed = now_seconds() - start;
        if (status != ROPE_OK) {
            fprintf(stderr, "%s: %s failed: %s: %s\n", sc->name, plan ? "rope_plan_run" : "rope_dispatch",
                    rope_status_string(status), report.message);
            rope_plan_destroy(plan);
            return 1;
        }
        best = elapsed < best ? elapsed : best;
    }
    rope_plan_destroy(plan);
    const double error = fmax(max_error(q, q_out, positions, tokens, Q_HEADS, cos_cache, sin_cache, sc->source),
                              max_error(k, k_out, positions, tokens, KV_HEADS, cos_cache, sin_cache, sc->source));
    const double bytes = 2.0 * (double)(q_elems + k_elems) * sizeof(float); /* read + write */
    printf("%-26s kernel %-40s max rel err %.2e   %7.2f GB/s   %8.1f us\n", sc->name, report.kernel, error,
           bytes / best * 1e-9, best * 1e6);
    free(q), free(k), free(q_out), free(k_out), free(positions);
    /* spec §7: |y - y_ref| <= 2^-22 max|x_pair|. */
    return error <= ldexp(1.0, -22) ? 0 : 1;
}

int main(void) {
    float *cos_cache = malloc(sizeof(float) * CACHE_LEN * PAIRS), *sin_cache = malloc(sizeof(float) * CACHE_LEN * PAIRS);
    if (!cos_cache || !sin_cache) {
        return 1;
    }
    for (int m = 0; m < CACHE_LEN; m++) { /* the table of spec §1, as an engine precomputes it */
        for (int i = 0; i < PAIRS; i++) {
            const double angle = (double)m * pow(10000.0, -2.0 * i / HEAD_DIM);
            cos_cache[m * PAIRS + i] = (float)cos(angle), sin_cache[m * PAIRS + i] = (float)sin(angle);
        }
    }
    printf("ropegen %s (ABI %u): Llama-3-8B-like layer, f32, half style, q 32 heads, kv 8 heads, head_dim 128\n",
           rope_version_string(), (unsigned)rope_abi_version());
    const Scenario scenarios[] = {
        {"prefill 4096 tok, cache", 1, 4096, ROPE_SOURCE_CACHE, 0, 0},
        {"prefill 4096 tok, compat", 1, 4096, ROPE_SOURCE_COMPAT, 0, 0},
        {"decode batch 8, cache", 8, 1, ROPE_SOURCE_CACHE, 4000, 0},
        {"decode batch 8, compat", 8, 1, ROPE_SOURCE_COMPAT, 4000, 0},
        {"decode batch 8, plan", 8, 1, ROPE_SOURCE_CACHE, 4000, 1},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        failures += run(&scenarios[i], cos_cache, sin_cache);
    }
    free(cos_cache), free(sin_cache);
    printf(failures ? "FAILED: %d scenario(s) out of tolerance\n" : "all scenarios within tolerance\n", failures);
    return failures ? 1 : 0;
}
