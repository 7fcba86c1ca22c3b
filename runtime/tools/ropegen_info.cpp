// SPDX-License-Identifier: Apache-2.0
// ropegen-info: what the library sees and would do on this machine. The CPU's features and the
// level the dispatcher uses, the GPU (CUDA builds), every kernel built in with the schedule it
// was generated from, and for one call shape the kernel rope_query() picks and why the others
// were passed over. Text by default, --json for tools.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "internal/json_string.h"
#include "internal/kernel_table.h"
#include "ropegen/rope.h"
#if ROPEGEN_CUDA
#include "internal/cuda_device.h"
#endif

namespace {

using ropegen::json_string;

// --- a small document model, printed as JSON or as indented text ------------------------------
struct Node {
    enum Kind { kString, kNumber, kBool, kNull, kJson, kList, kObject } kind = kNull;
    std::string text;                                  // scalars; kJson: a JSON text, verbatim
    std::vector<std::pair<std::string, Node>> fields;  // kObject (ordered); kList (names unused)

    static Node string(std::string s) { return {kString, std::move(s), {}}; }
    static Node number(long long n) { return {kNumber, std::to_string(n), {}}; }
    static Node boolean(bool b) { return {kBool, b ? "true" : "false", {}}; }
    static Node json(std::string s) { return s.empty() ? Node{} : Node{kJson, std::move(s), {}}; }
    static Node list() { return {kList, {}, {}}; }
    static Node object() { return {kObject, {}, {}}; }
    Node &add(std::string name, Node value) {
        fields.emplace_back(std::move(name), std::move(value));
        return fields.back().second;
    }
    Node &push(Node value) { return add("", std::move(value)); }
};

void print_json(const Node &node, int indent) {
    const std::string pad(indent + 2, ' ');
    switch (node.kind) {
    case Node::kString: std::fputs(json_string(node.text).c_str(), stdout); return;
    case Node::kNull: std::fputs("null", stdout); return;
    case Node::kList:
    case Node::kObject: {
        const bool object = node.kind == Node::kObject;
        std::fputs(object ? "{" : "[", stdout);
        for (size_t i = 0; i < node.fields.size(); i++) {
            std::printf("%s\n%s", i ? "," : "", pad.c_str());
            if (object) {
                std::printf("%s: ", json_string(node.fields[i].first).c_str());
            }
            print_json(node.fields[i].second, indent + 2);
        }
        std::printf("%s%s%s", node.fields.empty() ? "" : "\n", std::string(node.fields.empty() ? 0 : indent, ' ').c_str(),
                    object ? "}" : "]");
        return;
    }
    default: std::fputs(node.text.c_str(), stdout); return;
    }
}

bool is_scalar(const Node &node) {
    return node.kind != Node::kList && node.kind != Node::kObject;
}

void print_text(const Node &node, int indent) {
    const std::string pad(indent, ' ');
    for (const auto &[name, value] : node.fields) {
        const std::string label = node.kind == Node::kList ? pad + "-" : pad + name + ":";
        if (is_scalar(value)) {
            std::printf("%s %s\n", label.c_str(), value.kind == Node::kNull ? "-" : value.text.c_str());
        } else if (value.kind == Node::kList && !value.fields.empty() && is_scalar(value.fields[0].second)) {
            std::string joined;
            for (const auto &item : value.fields) {
                joined += (joined.empty() ? "" : ", ") + item.second.text;
            }
            std::printf("%s %s\n", label.c_str(), joined.c_str());
        } else if (node.kind == Node::kList && value.kind == Node::kObject && !value.fields.empty() &&
                   is_scalar(value.fields[0].second)) {  // "- first: value", the other fields under it
            std::printf("%s %s: %s\n", label.c_str(), value.fields[0].first.c_str(), value.fields[0].second.text.c_str());
            Node rest = value;
            rest.fields.erase(rest.fields.begin());
            print_text(rest, indent + 2);
        } else {
            std::printf("%s\n", label.c_str());
            print_text(value, indent + 2);
        }
    }
}

// --- what the build recorded ----------------------------------------------------------------------
struct FamilySchedule {
    const char *family, *default_file, *tuned_file, *provenance;
};
const FamilySchedule kFamilies[] = {
#define ROPE_SCHEDULE_FAMILY(family, default_file, tuned_file, provenance) {family, default_file, tuned_file, provenance},
#define ROPE_KERNEL_SCHEDULE(...)
#include "schedules.inc"
#undef ROPE_SCHEDULE_FAMILY
#undef ROPE_KERNEL_SCHEDULE
};
struct KernelSchedule {
    const char *kernel, *family, *entries, *params;
};
const KernelSchedule kKernelSchedules[] = {
#define ROPE_SCHEDULE_FAMILY(...)
#define ROPE_KERNEL_SCHEDULE(kernel, family, entries, params) {#kernel, family, entries, params},
#include "schedules.inc"
#undef ROPE_SCHEDULE_FAMILY
#undef ROPE_KERNEL_SCHEDULE
};

const KernelSchedule *schedule_of(const char *kernel) {
    for (const KernelSchedule &s : kKernelSchedules) {
        if (std::strcmp(s.kernel, kernel) == 0) {
            return &s;
        }
    }
    return nullptr;
}

const char *const kStyles[] = {"half", "interleaved"};
const char *const kSources[] = {"cache", "compat", "precise"};
const char *const kDtypes[] = {"f32", "f16", "bf16"};

Node kernel_node(const ropegen::KernelEntry &kernel) {
    Node node = Node::object();
    node.add("name", Node::string(kernel.name));
    if (kernel.cuda_capability != 0) {
        node.add("cuda_capability", Node::number(kernel.cuda_capability));
    } else {
        node.add("isa", Node::string(ropegen::isa_name(kernel.isa)));
        node.add("runs_here", Node::boolean(kernel.isa <= ropegen::detected_isa()));
    }
    node.add("style", Node::string(kStyles[kernel.style]));
    node.add("source", Node::string(kSources[kernel.source]));
    node.add("dtype", Node::string(kDtypes[kernel.dtype]));
    node.add("head_dim", kernel.head_dim ? Node::number(kernel.head_dim) : Node::string("any"));
    if (kernel.min_call_bytes != 0) {
        node.add("min_call_bytes", Node::number(static_cast<long long>(kernel.min_call_bytes)));
    }
    if (kernel.in_place_calls) {
        node.add("in_place_calls", Node::boolean(true));
    }
    if (const KernelSchedule *schedule = schedule_of(kernel.name)) {
        Node &s = node.add("schedule", Node::object());
        s.add("family", Node::string(schedule->family));
        s.add("entries", Node::string(schedule->entries));
        s.add("params", Node::string(schedule->params));
    }
    return node;
}

// --- the machine -----------------------------------------------------------------------------------
std::string cpu_model() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);) {
        for (const char *key : {"model name", "Model", "CPU part"}) {
            if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos) {
                return line.substr(line.find(':') + 2);
            }
        }
    }
    return "unknown";
}

Node cpu_node() {
    Node node = Node::object();
    node.add("model", Node::string(cpu_model()));
    Node &features = node.add("features", Node::object());
    for (const ropegen::CpuFeature &feature : ropegen::cpu_features()) {
        features.add(feature.name, Node::boolean(feature.present));
    }
    node.add("best_isa", Node::string(ropegen::isa_name(ropegen::detected_isa())));
    node.add("active_isa", Node::string(ropegen::isa_name(rope_active_isa())));
    const char *cap = std::getenv("ROPE_MAX_ISA");
    node.add("ROPE_MAX_ISA", cap ? Node::string(cap) : Node{});
    const char *threads = std::getenv("ROPE_NUM_THREADS");
    node.add("ROPE_NUM_THREADS", threads ? Node::string(threads) : Node{});
    return node;
}

Node gpu_node() {
    Node node = Node::object();
    size_t count = 0;
    ropegen::cuda_kernel_table(&count);
    node.add("cuda_kernels_built", Node::number(static_cast<long long>(count)));
#if ROPEGEN_CUDA
    using Init = int (*)(unsigned);
    using Count = int (*)(int *);
    using Get = int (*)(int *, int);
    using Name = int (*)(char *, int, int);
    using Attribute = int (*)(int *, int, int);
    std::string error;
    const auto init = reinterpret_cast<Init>(ropegen::cuda::driver_symbol("cuInit", &error));
    const auto version = reinterpret_cast<Count>(ropegen::cuda::driver_symbol("cuDriverGetVersion"));
    const auto device_count = reinterpret_cast<Count>(ropegen::cuda::driver_symbol("cuDeviceGetCount"));
    const auto get = reinterpret_cast<Get>(ropegen::cuda::driver_symbol("cuDeviceGet"));
    const auto name = reinterpret_cast<Name>(ropegen::cuda::driver_symbol("cuDeviceGetName"));
    const auto attribute = reinterpret_cast<Attribute>(ropegen::cuda::driver_symbol("cuDeviceGetAttribute"));
    int result = init && version && device_count && get && name && attribute ? init(0) : -1;
    int driver_version = 0, devices = 0;
    if (result == 0 && (result = version(&driver_version)) == 0) {
        result = device_count(&devices);
    }
    if (result != 0) {
        node.add("driver", Node{});
        node.add("error", Node::string(error.empty() ? ropegen::cuda::result_name(result) : error));
        return node;
    }
    node.add("driver", Node::string(std::to_string(driver_version / 1000) + "." + std::to_string(driver_version % 1000 / 10)));
    Node &list = node.add("devices", Node::list());
    for (int i = 0; i < devices; i++) {
        int device = 0, major = 0, minor = 0;
        char device_name[256] = {};
        get(&device, i);
        name(device_name, sizeof(device_name), device);
        attribute(&major, 75, device);  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        attribute(&minor, 76, device);  // ..._MINOR
        Node &d = list.push(Node::object());
        d.add("name", Node::string(device_name));
        d.add("compute_capability", Node::number(major * 10 + minor));
    }
#else
    node.add("driver", Node{});
    node.add("error", Node::string("this library was built without CUDA kernels"));
#endif
    return node;
}

// --- one call shape --------------------------------------------------------------------------------
struct CallShape {
    std::map<std::string, std::string> fields = {{"style", "half"}, {"source", "cache"}, {"dtype", "bf16"},
                                                 {"layout", "bshd"}, {"head_dim", "128"}, {"rotary_dim", "0"},
                                                 {"batch", "8"},     {"seq", "1"},        {"heads", "32"},
                                                 {"kv_heads", "8"},  {"in_place", "0"}};
};

int index_of(const char *const *names, size_t count, const std::string &value, const char *what) {
    for (size_t i = 0; i < count; i++) {
        if (value == names[i]) {
            return static_cast<int>(i);
        }
    }
    std::fprintf(stderr, "ropegen-info: %s=%s is not one of the known values\n", what, value.c_str());
    std::exit(2);
}

long long positive(const CallShape &shape, const char *key, long long low) {
    char *end = nullptr;
    const std::string &text = shape.fields.at(key);
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < low || value > (1ll << 20)) {
        std::fprintf(stderr, "ropegen-info: %s=%s must be an integer in [%lld, 2^20]\n", key, text.c_str(), low);
        std::exit(2);
    }
    return value;
}

// Buffers for one call of `shape` (zeros: the tool asks, it computes nothing worth keeping).
struct CallBuffers {
    std::vector<unsigned char> q, k, q_out, k_out, cos_cache, sin_cache;
};

rope_tensor tensor(std::vector<unsigned char> &storage, rope_dtype dtype, const std::string &layout, long long batch,
                   long long seq, long long heads, long long head_dim) {
    storage.assign(static_cast<size_t>(batch * seq * heads * head_dim) * ropegen::dtype_bytes(dtype), 0);
    rope_tensor t = {storage.data(), dtype, {batch, seq, heads, head_dim}, {0, 0, head_dim, 1}};
    if (layout == "bhsd") {
        t.strides[0] = heads * seq * head_dim, t.strides[2] = seq * head_dim, t.strides[1] = head_dim;
    } else if (layout == "sbhd") {
        t.strides[1] = batch * heads * head_dim, t.strides[0] = heads * head_dim;
    } else {
        t.strides[0] = seq * heads * head_dim, t.strides[1] = heads * head_dim;
    }
    return t;
}

Node call_node(const CallShape &shape) {
    const auto dtype = static_cast<rope_dtype>(index_of(kDtypes, 3, shape.fields.at("dtype"), "dtype"));
    const std::string &layout = shape.fields.at("layout");
    if (layout != "bshd" && layout != "bhsd" && layout != "sbhd") {
        std::fprintf(stderr, "ropegen-info: layout=%s is not bshd, bhsd or sbhd\n", layout.c_str());
        std::exit(2);
    }
    const long long batch = positive(shape, "batch", 1), seq = positive(shape, "seq", 1);
    const long long heads = positive(shape, "heads", 1), kv_heads = positive(shape, "kv_heads", 0);
    const long long head_dim = positive(shape, "head_dim", 1), rotary_dim = positive(shape, "rotary_dim", 0);
    const std::string &in_place = shape.fields.at("in_place");
    if (in_place != "0" && in_place != "1") {
        std::fprintf(stderr, "ropegen-info: in_place=%s is not 0 or 1\n", in_place.c_str());
        std::exit(2);
    }
    // The query reads real buffers (validation reads positions and checks overlaps): keep them small.
    if (batch * seq * std::max(heads, kv_heads) * head_dim > (1ll << 28)) {
        std::fprintf(stderr, "ropegen-info: --call: batch*seq*heads*head_dim above 2^28 elements; the tool allocates "
                             "the call's buffers, so ask with a smaller batch or seq (the kernel depends on them only through a "
                             "large-call kernel's size, which --kernels lists)\n");
        std::exit(2);
    }

    CallBuffers buffers;
    rope_params params = rope_params_init();
    params.style = static_cast<rope_style>(index_of(kStyles, 2, shape.fields.at("style"), "style"));
    params.angles.source = static_cast<rope_source>(index_of(kSources, 3, shape.fields.at("source"), "source"));
    params.rotary_dim = static_cast<int32_t>(rotary_dim);
    params.q = tensor(buffers.q, dtype, layout, batch, seq, heads, head_dim);
    params.q_out = in_place == "1" ? params.q : tensor(buffers.q_out, dtype, layout, batch, seq, heads, head_dim);
    if (kv_heads > 0) {
        params.k = tensor(buffers.k, dtype, layout, batch, seq, kv_heads, head_dim);
        params.k_out = in_place == "1" ? params.k : tensor(buffers.k_out, dtype, layout, batch, seq, kv_heads, head_dim);
    }
    if (params.angles.source == ROPE_SOURCE_CACHE) {  // one row per position 0..seq-1
        const size_t row = static_cast<size_t>(rotary_dim ? rotary_dim : head_dim) / 2;
        buffers.cos_cache.assign(static_cast<size_t>(seq) * row * sizeof(float), 0);
        buffers.sin_cache.assign(buffers.cos_cache.size(), 0);
        params.angles.cos_cache = buffers.cos_cache.data();
        params.angles.sin_cache = buffers.sin_cache.data();
        params.angles.cache_len = seq;
    }
    rope_report report = rope_report_init();
    const rope_status status = rope_query(&params, &report);

    Node node = Node::object();
    Node &asked = node.add("shape", Node::object());
    for (const auto &[key, value] : shape.fields) {
        asked.add(key, Node::string(value));
    }
    node.add("status", Node::string(rope_status_string(status)));
    node.add("message", Node::string(report.message));
    node.add("kernel", status == ROPE_OK ? Node::string(report.kernel) : Node{});
    // The dispatcher takes the first kernel of the table (best level first, fixed head_dim before
    // the any-head_dim kernel) that computes the call, whose level is at most the active one and,
    // for a large-call kernel, that moves at least its min_call_bytes; for an in-place kernel, that
    // rotates q and k where they lie.
    Node &candidates = node.add("candidates", Node::list());
    const ropegen::KernelEntry *chosen_kernel = nullptr;
    size_t count = 0;
    const ropegen::KernelEntry *table = ropegen::kernel_table(&count);
    for (size_t i = 0; status == ROPE_OK && i < count; i++) {
        const ropegen::KernelEntry &kernel = table[i];
        if (!ropegen::kernel_matches(kernel, params)) {
            continue;
        }
        std::string why;
        const bool chosen = std::strcmp(kernel.name, report.kernel) == 0;
        const std::string moved = "; the call moves " + std::to_string(ropegen::call_bytes(params)) + " bytes";
        if (chosen) {
            why = std::string("chosen: the best level allowed (") + ropegen::isa_name(rope_active_isa()) + ")" +
                  (kernel.head_dim ? ", specialized for head_dim " + std::to_string(kernel.head_dim)
                                   : std::string(", the any-head_dim kernel")) +
                  (kernel.min_call_bytes ? ", for calls moving at least " + std::to_string(kernel.min_call_bytes) +
                                               " bytes" + moved
                                         : std::string()) +
                  (kernel.in_place_calls ? ", for calls in place" : "");
        } else if (chosen_kernel != nullptr) {
            why = "not needed: a kernel before it in the table was chosen";
        } else if (kernel.isa <= rope_active_isa() && !ropegen::call_class_fits(kernel, params)) {
            why = kernel.in_place_calls ? std::string("passed over: for calls in place (q_out = q, k_out = k)")
                                        : "passed over: for calls moving at least " + std::to_string(kernel.min_call_bytes) +
                                              " bytes" + moved;
        } else if (kernel.isa <= rope_active_isa() && !ropegen::pair_words_fit(kernel, params)) {
            why = "passed over: stores its 16-bit lanes as 32-bit words, and the outputs are not 4-byte aligned with "
                  "even strides";
        } else if (kernel.isa > ropegen::detected_isa()) {
            why = std::string("passed over: needs ") + ropegen::isa_name(kernel.isa) + "; this CPU's best is " +
                  ropegen::isa_name(ropegen::detected_isa());
        } else {
            why = std::string("passed over: above the cap ") + ropegen::isa_name(rope_active_isa()) +
                  " (ROPE_MAX_ISA or rope_set_max_isa)";
        }
        chosen_kernel = chosen ? &kernel : chosen_kernel;
        Node &candidate = candidates.push(Node::object());
        candidate.add("kernel", Node::string(kernel.name));
        candidate.add("why", Node::string(why));
    }
    if (chosen_kernel != nullptr) {
        node.add("chosen_kernel", kernel_node(*chosen_kernel));
    }
    return node;
}

void usage(FILE *out) {
    std::fputs("usage: ropegen-info [--json] [--kernels] [--call key=value,...]\n"
               "  The library, this machine's CPU and GPU, the schedules built in, and which kernel one call\n"
               "  shape would run and why. --kernels also lists every kernel with its schedule.\n"
               "  --call keys (default: a Llama-3-8B decode step):\n"
               "    style=half|interleaved source=cache|compat|precise dtype=f32|f16|bf16\n"
               "    layout=bshd|bhsd|sbhd head_dim=128 rotary_dim=0 batch=8 seq=1 heads=32 kv_heads=8 (0: q only)\n"
               "    in_place=0|1 (1: q_out = q, k_out = k)\n",
               out);
}

}  // namespace

int main(int argc, char **argv) {
    bool json = false, list_kernels = false;
    CallShape shape;
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        if (arg == "--json") {
            json = true;
        } else if (arg == "--kernels") {
            list_kernels = true;
        } else if (arg == "--call" && i + 1 < argc) {
            const std::string spec = argv[++i];
            for (size_t start = 0; start < spec.size();) {
                const size_t end = std::min(spec.find(',', start), spec.size());
                const std::string item = spec.substr(start, end - start);
                const size_t eq = item.find('=');
                if (eq == std::string::npos || shape.fields.count(item.substr(0, eq)) == 0) {
                    std::fprintf(stderr, "ropegen-info: --call: '%s' is not key=value with a known key\n", item.c_str());
                    usage(stderr);
                    return 2;
                }
                shape.fields[item.substr(0, eq)] = item.substr(eq + 1);
                start = end + 1;
            }
        } else if (arg == "--help" || arg == "-h") {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }

    Node doc = Node::object();
    Node &library = doc.add("library", Node::object());
    library.add("version", Node::string(rope_version_string()));
    library.add("abi_version", Node::number(rope_abi_version()));
    library.add("halide", Node::string(ROPEGEN_HALIDE_VERSION));
    library.add("architecture", Node::string(ROPEGEN_ARCH));
    doc.add("cpu", cpu_node());
    doc.add("gpu", gpu_node());
    size_t cpu_count = 0, cuda_count = 0;
    const ropegen::KernelEntry *cpu_kernels = ropegen::kernel_table(&cpu_count);
    const ropegen::KernelEntry *cuda_kernels = ropegen::cuda_kernel_table(&cuda_count);
    Node &kernels = doc.add("kernels", Node::object());
    kernels.add("cpu", Node::number(static_cast<long long>(cpu_count)));
    kernels.add("cuda", Node::number(static_cast<long long>(cuda_count)));
    Node &levels = kernels.add("isa_levels", Node::list());
    size_t level_count = 0;
    const ropegen::IsaLevel *level = ropegen::isa_levels(&level_count);
    for (size_t i = 0; i < level_count; i++) {
        levels.push(Node::string(level[i].name));
    }
    if (list_kernels) {
        Node &all = kernels.add("list", Node::list());
        for (size_t i = 0; i < cpu_count; i++) {
            all.push(kernel_node(cpu_kernels[i]));
        }
        for (size_t i = 0; i < cuda_count; i++) {
            all.push(kernel_node(cuda_kernels[i]));
        }
    }
    Node &schedules = doc.add("schedules", Node::list());
    for (const FamilySchedule &family : kFamilies) {
        Node &s = schedules.push(Node::object());
        s.add("family", Node::string(family.family));
        s.add("default_file", Node::string(family.default_file));
        s.add("tuned_file", *family.tuned_file ? Node::string(family.tuned_file) : Node{});
        // JSON output embeds the tuned file's meta.tuned as it is; text prints it on one line.
        s.add("tuned", json ? Node::json(family.provenance) : (*family.provenance ? Node::string(family.provenance) : Node{}));
    }
    doc.add("call", call_node(shape));
    if (json) {
        print_json(doc, 0);
        std::fputc('\n', stdout);
    } else {
        print_text(doc, 0);
    }
    return 0;
}
