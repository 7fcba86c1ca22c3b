/* SPDX-License-Identifier: Apache-2.0 */
/* The C ABI from C99 (no extensions), with nothing but <ropegen/rope.h>: one real call checked
 * against the formulas of spec §2 written out by hand, and one failing call. Exit status 0 on
 * success, else the number of failed checks. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <ropegen/rope.h>

static int failures = 0;

static void check(int condition, const char *what) {
    if (!condition) {
        fprintf(stderr, "FAILED: %s\n", what);
        failures++;
    }
}

static rope_tensor one_token_f32(float *data, int64_t head_dim) {
    rope_tensor t;
    memset(&t, 0, sizeof(t));
    t.data = data;
    t.dtype = ROPE_DTYPE_F32;
    t.sizes[0] = 1;
    t.sizes[1] = 1;
    t.sizes[2] = 1;
    t.sizes[3] = head_dim;
    t.strides[0] = head_dim;
    t.strides[1] = head_dim;
    t.strides[2] = head_dim;
    t.strides[3] = 1;
    return t;
}

int main(void) {
    enum { kDim = 8, kPairs = kDim / 2 };
    const int64_t position = 3;
    float q[kDim] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, 1.0f, -2.0f};
    float q_out[kDim];
    float before[kDim];
    rope_params params = rope_params_init();
    rope_report report = rope_report_init();
    rope_status status;
    rope_isa active;
    rope_plan *plan = NULL;
    int i;

    params.style = ROPE_STYLE_HALF;
    params.direction = ROPE_FORWARD;
    params.q = one_token_f32(q, kDim);
    params.q_out = one_token_f32(q_out, kDim);
    params.positions.kind = ROPE_POSITIONS_OFFSET;
    params.positions.offset = position;
    params.angles.source = ROPE_SOURCE_PRECISE;

    status = rope_dispatch(&params, &report);
    check(status == ROPE_OK, "rope_dispatch returns ROPE_OK");
    check(report.status == ROPE_OK, "report.status is ROPE_OK");
    check(strncmp(report.kernel, "ropegen_half_precise_", 21) == 0, "report.kernel names a half precise kernel");
    for (i = 0; i < kPairs; i++) {
        /* half style: pair i = lanes (i, i + P); inv_freq = 10000^(-2i/D). */
        const double angle = (double)position * pow(10000.0, -2.0 * i / kDim);
        const double c = cos(angle), s = sin(angle);
        const double want_a = q[i] * c - q[i + kPairs] * s;
        const double want_b = q[i + kPairs] * c + q[i] * s;
        const double scale = fabs(q[i]) > fabs(q[i + kPairs]) ? fabs(q[i]) : fabs(q[i + kPairs]);
        if (fabs(q_out[i] - want_a) > ldexp(scale, -21) || fabs(q_out[i + kPairs] - want_b) > ldexp(scale, -21)) {
            fprintf(stderr, "pair %d: got (%.9g, %.9g), want (%.9g, %.9g)\n", i, q_out[i], q_out[i + kPairs], want_a,
                    want_b);
            failures++;
        }
    }

    /* The same call as a plan: made once, run twice, the same bits as rope_dispatch's. */
    memcpy(before, q_out, sizeof(q_out));
    memset(q_out, 0, sizeof(q_out));
    status = rope_plan_create(&params, &plan, &report);
    check(status == ROPE_OK && plan != NULL, "rope_plan_create returns ROPE_OK and a plan");
    check(rope_plan_run(plan, &report) == ROPE_OK && rope_plan_run(plan, &report) == ROPE_OK, "rope_plan_run returns ROPE_OK");
    check(memcmp(before, q_out, sizeof(q_out)) == 0, "the plan writes what rope_dispatch wrote");
    rope_plan_destroy(plan);

    /* A failing call: the status, a message naming the argument, and the output untouched. */
    memcpy(before, q_out, sizeof(q_out));
    params.rotary_dim = 3;
    status = rope_dispatch(&params, &report);
    check(status == ROPE_ERR_BAD_ROTARY, "an odd rotary_dim is ROPE_ERR_BAD_ROTARY");
    check(report.status == ROPE_ERR_BAD_ROTARY, "report.status matches");
    check(strstr(report.message, "rotary_dim") != NULL, "the message names rotary_dim");
    check(memcmp(before, q_out, sizeof(q_out)) == 0, "a failed call writes no output");
    check(strncmp(rope_status_string(status), "ROPE_ERR_BAD_ROTARY", 19) == 0, "rope_status_string names it");

    /* Unknown enum values, which a C caller can pass (in C++ they would be undefined behaviour). */
    active = rope_active_isa();
    check(rope_set_max_isa((rope_isa)7) == ROPE_ERR_BAD_ENUM, "rope_set_max_isa(7) is ROPE_ERR_BAD_ENUM");
    check(rope_set_max_isa((rope_isa)-1) == ROPE_ERR_BAD_ENUM, "rope_set_max_isa(-1) is ROPE_ERR_BAD_ENUM");
    check(rope_active_isa() == active, "a rejected cap changes nothing");
    check(rope_status_string((rope_status)99) != NULL && rope_status_string((rope_status)99)[0] != '\0',
          "an unknown status still has a text");

    if (failures == 0) {
        printf("abi_c_test: all checks passed (%s)\n", rope_version_string());
    }
    return failures;
}
