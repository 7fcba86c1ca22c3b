// SPDX-License-Identifier: Apache-2.0
// The libFuzzer harness of rope_dispatch(). Each input is a Recipe (fuzz_recipe.h) for one call,
// made real with every buffer between guard pages (fuzz_call.h). The call is made twice, with
// rope_query() and then rope_dispatch(), and must keep the contract of rope.h:
//  - a call the validity model (call_model.h) finds broken is rejected with the status of a
//    broken rule; a valid one runs, or is UNSUPPORTED exactly when no kernel of the build serves
//    it (or gets a rejection the model tolerates: a documented, conservative limit);
//  - a rejected call names the problem in the report and writes no byte anywhere;
//  - rope_query() writes nothing and agrees with rope_dispatch() on status and kernel;
//  - a call that runs writes only its outputs, and every output element is the fp64 oracle's
//    rotation within the tolerance of spec §7 (lanes outside the rotary slice bit-exact);
//  - no access outside any buffer (the guard pages fault) and no sanitizer report.
// Any violation prints the call and traps, so libFuzzer saves the input. Deterministic: the
// values of every buffer come from the input's seed.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "call_model.h"
#include "fuzz_call.h"
#include "fuzz_recipe.h"
#include "reference/rope_reference.h"
#include "ropegen/rope.h"
#include "support/kernels.h"

extern "C" rope_status ropegen_fuzz_set_max_isa(int32_t isa);  // raw_isa.c

namespace ropegen::fuzz {
namespace {

namespace ref = ropegen::reference;

/// Products beyond this may overflow f32 on the way (the spec's tolerance assumes they do not).
constexpr double kLargestCheckedProduct = 0x1p100;

/// The report's fields, read as plain data (a library bug must not become UB in the harness).
struct ReportFields {
    bool present = false;
    int32_t status = 0;
    std::string message, kernel;
    bool message_terminated = true, kernel_terminated = true;
};

ReportFields read_report(const FuzzCall &call, rope_report *report) {
    ReportFields fields;
    if (report == nullptr || call.report_size() < sizeof(rope_report)) {
        return fields;
    }
    fields.present = true;
    std::memcpy(&fields.status, &report->status, sizeof(fields.status));
    fields.message_terminated = std::memchr(report->message, '\0', sizeof(report->message)) != nullptr;
    fields.kernel_terminated = std::memchr(report->kernel, '\0', sizeof(report->kernel)) != nullptr;
    fields.message.assign(report->message, strnlen(report->message, sizeof(report->message)));
    fields.kernel.assign(report->kernel, strnlen(report->kernel, sizeof(report->kernel)));
    return fields;
}

std::string status_name(int32_t status) {
    rope_status value;
    store_raw(value, status);
    return std::to_string(status) + " (" + rope_status_string(value) + ")";
}

class Harness {
public:
    explicit Harness(FuzzCall &call) : call_(call), verdict_(judge_validity(call)) {
    }

    void run() {
        if (tracing()) {  // first, so that a crash inside the library still shows the call
            std::fprintf(stderr, "ropegen_fuzz: call:\n%s", call_.describe().c_str());
        }
        apply_isa_cap();
        call_.reset_report();
        step_ = "rope_query";
        const int32_t queried = static_cast<int32_t>(rope_query(call_.params_pointer(), call_.report_pointer()));
        const ReportFields query_report = check_report(queried);
        expect_nothing_written();
        check_status(queried, query_report);
        if (queried == ROPE_OK && !call_.fully_backed()) {
            trace(queried, "validated only (too large to allocate)", query_report);
            return;
        }

        call_.reset_report();
        step_ = "rope_dispatch";
        const int32_t dispatched = static_cast<int32_t>(rope_dispatch(call_.params_pointer(), call_.report_pointer()));
        if (dispatched != queried) {
            const ReportFields report = read_report(call_, call_.report_pointer());
            fail("rope_dispatch returned " + status_name(dispatched) + " but rope_query " + status_name(queried) +
                 " for the same call" + (report.present ? "; message: \"" + report.message + "\"" : ""));
        }
        const ReportFields dispatch_report = check_report(dispatched);
        if (dispatched != ROPE_OK) {
            expect_nothing_written();
            trace(dispatched, "rejected", dispatch_report);
            return;
        }
        if (query_report.present && dispatch_report.kernel != query_report.kernel) {
            fail("rope_dispatch ran kernel '" + dispatch_report.kernel + "' but rope_query named '" +
                 query_report.kernel + "'");
        }
        std::vector<int> outputs = {kQOut};
        if (call_.has_k()) {
            outputs.push_back(kKOut);
        }
        if (auto change = call_.changed_outside(outputs)) {
            fail("the call wrote outside its outputs: " + *change);
        }
        check_outputs();
        trace(dispatched, "ran and matched the oracle", dispatch_report);
    }

private:
    /// ROPEGEN_FUZZ_TRACE set: the call and its outcome are printed (to check seeds, or debug a
    /// crash inside the library).
    static bool tracing() {
        static const bool enabled = std::getenv("ROPEGEN_FUZZ_TRACE") != nullptr;
        return enabled;
    }
    void trace(int32_t status, const char *outcome, const ReportFields &report) const {
        if (tracing()) {
            std::fprintf(stderr, "ropegen_fuzz: %s: %s%s%s\n", status_name(status).c_str(), outcome,
                         report.present ? "; " : "", (report.kernel + report.message).c_str());
        }
    }

    [[noreturn]] void fail(const std::string &what) const {
        std::fprintf(stderr, "\nropegen_fuzz: CONTRACT VIOLATION in %s: %s\ncall:\n%svalidity model:\n%s",
                     step_.c_str(), what.c_str(), call_.describe().c_str(), verdict_.describe().c_str());
        std::fflush(stderr);
        __builtin_trap();
    }

    void apply_isa_cap() {
        step_ = "rope_set_max_isa";
        if (ropegen_fuzz_set_max_isa(ROPE_ISA_NONE) != ROPE_OK) {
            fail("rope_set_max_isa(ROPE_ISA_NONE) failed");
        }
        const auto detected = static_cast<int32_t>(rope_active_isa());
        const int32_t cap = call_.isa_cap();
        if (cap == ROPE_ISA_NONE) {
            return;
        }
        // rope.h: a level of this architecture is a cap; another architecture's level is
        // unsupported; any other value is no rope_isa.
        const std::vector<rope_isa> own = test::isa_levels();
        const bool valid = std::find(own.begin(), own.end(), cap) != own.end();
        const bool other_arch = !valid && (cap == ROPE_ISA_SSE41 || cap == ROPE_ISA_AVX2 || cap == ROPE_ISA_AVX512 ||
                                           cap == ROPE_ISA_NEON || cap == ROPE_ISA_NEON_FP16);
        const int32_t expected = valid ? ROPE_OK : other_arch ? ROPE_ERR_UNSUPPORTED : ROPE_ERR_BAD_ENUM;
        const auto status = static_cast<int32_t>(ropegen_fuzz_set_max_isa(cap));
        if (status != expected) {
            fail("rope_set_max_isa(" + std::to_string(cap) + ") returned " + status_name(status));
        }
        const auto active = static_cast<int32_t>(rope_active_isa());
        if (active != (valid ? std::min(detected, cap) : detected)) {
            fail("after rope_set_max_isa(" + std::to_string(cap) + ") the active ISA is " + std::to_string(active) +
                 "; the CPU's is " + std::to_string(detected));
        }
    }

    ReportFields check_report(int32_t status) const {
        const ReportFields report = read_report(call_, call_.report_pointer());
        if (auto change = call_.report_tail_changed()) {
            fail(*change);
        }
        if (!report.present) {
            return report;
        }
        if (report.status != status) {
            fail("report.status is " + status_name(report.status) + " but the call returned " + status_name(status));
        }
        if (!report.message_terminated || !report.kernel_terminated) {
            fail("report.message or report.kernel is not NUL-terminated");
        }
        if (status == ROPE_OK && (!report.message.empty() || report.kernel.empty())) {
            fail("a successful call must leave report.message empty and name report.kernel; message: \"" +
                 report.message + "\" kernel: \"" + report.kernel + "\"");
        }
        if (status != ROPE_OK && (report.message.empty() || !report.kernel.empty())) {
            fail("a rejected call (" + status_name(status) + ") must explain itself in report.message and name no "
                 "kernel; message: \"" + report.message + "\" kernel: \"" + report.kernel + "\"");
        }
        return report;
    }

    void expect_nothing_written() const {
        if (auto change = call_.changed_outside({})) {
            fail("the call wrote although it " +
                 std::string(step_ == "rope_query" ? "only validates" : "was rejected") + ": " + *change);
        }
    }

    void check_status(int32_t status, const ReportFields &report) const {
        if (status < ROPE_OK || status > ROPE_ERR_BAD_POINTER) {
            fail("unknown status " + std::to_string(status));
        }
        const std::string got = status_name(status) + (report.present ? ", message \"" + report.message + "\"" : "");
        if (!verdict_.valid()) {
            if (status == ROPE_OK || status == ROPE_ERR_UNSUPPORTED) {
                fail("got " + got + " for a call that breaks a rule of the ABI");
            }
            if (!verdict_.allows_rejection(status)) {
                fail("got " + got + ", not the status of a rule the call breaks");
            }
            return;
        }
        if (status != ROPE_OK && status != ROPE_ERR_UNSUPPORTED) {
            if (!verdict_.allows_rejection(status)) {
                fail("rejected a valid call: " + got);
            }
            return;
        }
        // Valid: it runs exactly when a kernel of this build serves it at the active ISA level.
        const KernelEntry *kernel = test::first_matching_kernel(call_.params(), rope_active_isa());
        if (status == ROPE_ERR_UNSUPPORTED && kernel != nullptr && !verdict_.allows_rejection(status)) {
            fail("got " + got + " although kernel " + kernel->name + " serves the call");
        }
        if (status == ROPE_OK && kernel == nullptr) {
            fail("got ROPE_OK although no kernel of this build serves the call");
        }
        if (status == ROPE_OK && report.present && report.kernel != kernel->name) {
            fail("report.kernel is '" + report.kernel + "' but the first kernel serving the call is " + kernel->name);
        }
    }

    // --- outputs against the oracle (spec §7) -------------------------------------------------
    /// What the comparison of one call's outputs needs, resolved once.
    struct Oracle {
        rope_dtype dtype;
        rope_style style;
        int rotary, offset;
        rope_source source;
        ref::Scaling scaling;  ///< of a computed source
        double attn_factor;    ///< of a computed source: the caller's, else the scaling's (spec §6)
        double scale;          ///< |attn_factor| of a computed source, else 1: bounds |c| and |s| of its angles
        rope_mrope mrope;      ///< sections all 0: no mrope
        bool round_cos_sin;    ///< the parity mode (spec §4)
    };

    /// The call's scaling as the reference takes it, zero fields resolved to their defaults.
    ref::Scaling reference_scaling() const {
        const rope_scaling &sc = call_.params().scaling;
        ref::Scaling scaling;
        scaling.type = static_cast<rope_scaling_type>(enum_value(sc.type));
        scaling.factor = sc.factor;
        scaling.low_freq_factor = sc.low_freq_factor;
        scaling.high_freq_factor = sc.high_freq_factor;
        scaling.beta_fast = sc.beta_fast != 0 ? sc.beta_fast : 32.0;
        scaling.beta_slow = sc.beta_slow != 0 ? sc.beta_slow : 1.0;
        scaling.original_max = sc.original_max_positions;
        scaling.max_positions = sc.max_positions;
        scaling.mscale = sc.mscale;
        scaling.mscale_all_dim = sc.mscale_all_dim;
        scaling.truncate = sc.yarn_no_truncate == 0;
        scaling.short_factor = call_.scaling_table(kShortFactor);
        scaling.long_factor = call_.scaling_table(kLongFactor);
        scaling.inv_freq = call_.scaling_table(kInvFreq);
        return scaling;
    }

    void check_outputs() const {
        const rope_params &p = call_.params();
        const int64_t batch = p.q.sizes[0], seq = p.q.sizes[1];
        const auto source = static_cast<rope_source>(enum_value(p.angles.source));
        const ref::Scaling scaling = reference_scaling();
        // The library takes the derived factor as an f32, like a caller's (rope_angles.attn_factor).
        const double attn_factor =
            p.angles.attn_factor != 0 ? p.angles.attn_factor : static_cast<float>(ref::scaling_attn_factor(scaling));
        // A cache source's scale is its table entries' (check_head); attn_factor is folded in there.
        const Oracle oracle{static_cast<rope_dtype>(enum_value(p.q.dtype)),
                            static_cast<rope_style>(enum_value(p.style)),
                            static_cast<int>(p.rotary_dim != 0 ? p.rotary_dim : p.q.sizes[3]),
                            p.rotary_offset,
                            source,
                            scaling,
                            attn_factor,
                            source != ROPE_SOURCE_CACHE ? std::fabs(attn_factor) : 1.0,
                            p.mrope,
                            p.round_cos_sin != 0};
        const bool any_head = p.q.sizes[2] > 0 || (call_.has_k() && p.k.sizes[2] > 0);
        if (batch == 0 || seq == 0 || !any_head) {
            return;  // nothing to compare (batch may be huge when seq is 0)
        }
        if (static_cast<__int128>(call_.positions().values.size()) != static_cast<__int128>(batch) * seq) {
            fail("harness: a call that ran has no list of its positions");
        }
        // Batch items, or varlen's packed sequences, each with its own frequencies.
        for (const FuzzCall::Sequence &sequence : call_.sequences()) {
            if (sequence.length == 0) {
                continue;
            }
            const Frequencies frequencies = sequence_frequencies(oracle, sequence);
            long double largest_frequency = 0;
            for (const long double frequency : frequencies.exact) {
                largest_frequency = std::max(largest_frequency, std::fabs(frequency));
            }
            for (int64_t s = sequence.first; s < sequence.first + sequence.length; s++) {
                const int64_t b = sequence.batch_item, token = b * seq + s;
                const auto position = static_cast<int64_t>(call_.positions().values[token]);
                const ref::CosSin angles = token_angles(oracle, frequencies, token);
                const std::vector<double> scales = lane_scales(oracle, angles, p.q.sizes[3]);
                // The spec bounds the precise source's error for positions below 2^24 only, that is
                // angles below 2^24 at unscaled frequencies (at most 1); a scaling that raises them
                // (LINEAR by a factor below 1) reaches larger angles, where an ulp of the f64
                // frequency moves the angle by angle x 2^-53: beyond, the bound grows by 32
                // such ulps (validation keeps angles below 2^32, so at most 2^-16).
                const long double largest_angle = largest_stream_position(token) * std::max(largest_frequency, 1.0L);
                const double angle_slack = source == ROPE_SOURCE_PRECISE && largest_angle > ref::kPreciseMaxPosition
                                               ? static_cast<double>(largest_angle) * 0x1p-48
                                               : 0.0;
                for (const auto &[in, out] : {std::pair{kQ, kQOut}, std::pair{kK, kKOut}}) {
                    for (int64_t h = 0; (in == kQ || call_.has_k()) && h < call_.view(in).sizes[2]; h++) {
                        check_head(oracle, in, out, {b, s, h}, position, angles, scales, angle_slack);
                    }
                }
            }
        }
    }

    /// What bounds |c| and |s| of each lane's pair: the computed sources' attn_factor, or the
    /// pair's entries of a caller's table, which may hold any values (NaN and Inf are judged
    /// apart, in within_spec).
    static std::vector<double> lane_scales(const Oracle &oracle, const ref::CosSin &angles, int64_t head_dim) {
        std::vector<double> scale(static_cast<size_t>(head_dim), oracle.scale);
        for (int i = 0; oracle.source == ROPE_SOURCE_CACHE && i < oracle.rotary / 2; i++) {
            const ref::PairLanes lanes = ref::pair_lanes(oracle.style, i, oracle.rotary, oracle.offset);
            for (const double value : {angles.cos[i], angles.sin[i]}) {
                if (std::isfinite(value)) {
                    scale[lanes.a] = scale[lanes.b] = std::max(scale[lanes.a], std::fabs(value));
                }
            }
        }
        return scale;
    }

    /// One head of `out` against the rotation of the same head of `in` before the call.
    void check_head(const Oracle &oracle, int in, int out, const std::array<int64_t, 3> &head, int64_t position,
                    const ref::CosSin &angles, const std::vector<double> &scale, double angle_slack) const {
        const auto [b, s, h] = head;
        const int64_t head_dim = call_.view(in).sizes[3];
        std::vector<double> x(static_cast<size_t>(head_dim));
        for (int64_t d = 0; d < head_dim; d++) {
            x[d] = ref::decode(call_.bits_before(in, b, s, h, d), oracle.dtype);
        }
        const std::vector<double> y = ref::rotate_pairs(x, oracle.rotary, oracle.offset, oracle.style, angles);
        for (int64_t d = 0; d < head_dim; d++) {
            const int partner = ref::partner_lane(oracle.style, static_cast<int>(d), oracle.rotary, oracle.offset);
            const uint32_t got = call_.bits_now(out, b, s, h, d);
            bool ok;
            if (partner < 0) {
                ok = got == call_.bits_before(in, b, s, h, d);
            } else {
                const double largest_product = std::max(std::fabs(x[d]), std::fabs(x[partner])) * std::max(1.0, scale[d]);
                ok = within_spec(got, y[d], x[d], x[partner], oracle, scale[d], angle_slack,
                                 largest_product <= kLargestCheckedProduct);
            }
            if (!ok) {
                std::ostringstream what;
                what << std::setprecision(9) << "output differs from the fp64 oracle beyond spec §7: "
                     << kTensorNames[out] << "[" << b << "][" << s << "][" << h << "][" << d << "] (position "
                     << position << "): got " << ref::decode(got, oracle.dtype) << " (bits 0x" << std::hex << got
                     << std::dec << "), want " << y[d] << " from x = " << x[d];
                if (partner < 0) {
                    what << "; a lane outside the rotary slice must be copied bit-exact";
                } else {
                    what << " and its partner lane " << partner << " = " << x[partner];
                }
                fail(what.str());
            }
        }
    }

    /// inv_freq of a computed source for one sequence (spec §6: DYNAMIC and LONGROPE take its
    /// length, its largest position + 1); none for the cache source.
    struct Frequencies {
        std::vector<float> compat;
        std::vector<long double> exact;
    };
    Frequencies sequence_frequencies(const Oracle &oracle, const FuzzCall::Sequence &sequence) const {
        const auto first = call_.positions().values.begin() + sequence.batch_item * call_.params().q.sizes[1] + sequence.first;
        const auto length = static_cast<int64_t>(*std::max_element(first, first + sequence.length) + 1);
        const double base = call_.params().angles.base != 0 ? call_.params().angles.base : 10000.0;
        switch (oracle.source) {
            case ROPE_SOURCE_COMPAT: return {ref::compat_scaled_inv_freq(base, oracle.rotary, oracle.scaling, length), {}};
            case ROPE_SOURCE_PRECISE: return {{}, ref::exact_scaled_inv_freq(base, oracle.rotary, oracle.scaling, length)};
            default: return {};
        }
    }

    /// The largest of a token's positions (mrope: of its three streams).
    int64_t largest_stream_position(int64_t token) const {
        __int128 largest = call_.positions().values[token];
        for (const std::vector<__int128> &stream : call_.positions().mrope_values) {
            largest = stream.empty() ? largest : std::max(largest, stream[token]);
        }
        return static_cast<int64_t>(largest);
    }

    /// cos and sin of one token (spec §5): mrope's pairs from their streams (spec §6), attn_factor,
    /// the parity mode's rounding (spec §4) and the direction applied.
    ref::CosSin token_angles(const Oracle &oracle, const Frequencies &frequencies, int64_t token) const {
        const FuzzCall::TokenPositions &positions = call_.positions();
        ref::CosSin angles = position_angles(oracle, frequencies, static_cast<int64_t>(positions.values[token]));
        if (!positions.mrope_values[0].empty()) {
            const auto stream_angles = [&](int stream) {
                return position_angles(oracle, frequencies, static_cast<int64_t>(positions.mrope_values[stream][token]));
            };
            angles = ref::mrope_cos_sin(angles, stream_angles(0), stream_angles(1), oracle.mrope.sections[0],
                                        oracle.mrope.sections[1]);
        }
        if (oracle.round_cos_sin) {
            angles = ref::rounded_to_dtype(angles, oracle.dtype);
        }
        return ref::for_direction(angles, static_cast<rope_direction>(enum_value(call_.params().direction)));
    }

    /// cos and sin of one position of a source, attn_factor applied.
    ref::CosSin position_angles(const Oracle &oracle, const Frequencies &frequencies, int64_t position) const {
        ref::CosSin angles;
        switch (oracle.source) {
            case ROPE_SOURCE_COMPAT: angles = ref::compat_cos_sin(position, frequencies.compat, oracle.attn_factor); break;
            case ROPE_SOURCE_PRECISE: angles = ref::exact_cos_sin(position, frequencies.exact, oracle.attn_factor); break;
            default:
                for (int i = 0; i < oracle.rotary / 2; i++) {
                    angles.cos.push_back(call_.cache_value(false, position, i));
                    angles.sin.push_back(call_.cache_value(true, position, i));
                }
        }
        return angles;
    }

    /// One rotated lane: NaN in the pair gives NaN, Inf gives a non-finite value, and so do a NaN
    /// and an Inf of the cos/sin table (fp64 meets a non-finite value only where f32 does: its
    /// products of f32 values cannot overflow); otherwise, where no product can overflow f32, the
    /// bound of spec §7 for |c|, |s| <= `scale`.
    static bool within_spec(uint32_t got_bits, double want, double x, double partner, const Oracle &oracle, double scale,
                            double angle_slack, bool checked) {
        const rope_dtype dtype = oracle.dtype;
        const double got = ref::decode(got_bits, dtype);
        if (std::isnan(x) || std::isnan(partner) || std::isnan(want)) {
            return std::isnan(got);
        }
        if (std::isinf(x) || std::isinf(partner) || std::isinf(want)) {
            return !std::isfinite(got);
        }
        if (!checked) {
            return true;
        }
        const double max_pair = std::max(std::fabs(x), std::fabs(partner));
        if (dtype == ROPE_DTYPE_F32) {
            return std::isfinite(got) &&
                   std::fabs(got - want) <=
                       (ref::relative_tolerance(oracle.source, scale) + angle_slack * scale) * max_pair + ref::kF32SubnormalSlack;
        }
        return !std::isnan(got) &&
               (ref::ulp_distance(got_bits, ref::encode(want, dtype), dtype) <= ref::kSixteenBitUlps ||
                (std::isfinite(got) && std::fabs(got - want) <= (ref::sixteen_bit_tolerance(scale) + angle_slack * scale) * max_pair));
    }

    FuzzCall &call_;
    const Verdict verdict_;
    std::string step_;
};

}  // namespace
}  // namespace ropegen::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace ropegen::fuzz;
    FuzzCall call(decode_recipe(data, size));
    if (call.skip_reason().empty()) {
        Harness(call).run();
    }
    return 0;
}
