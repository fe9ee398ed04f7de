// cudaemu driver: the CUDA driver API and NVRTC calls that pkg/gpu/cuda
// makes, emulated on the host CPU, so the GPU engine's tests run on a
// machine with no GPU (tools/cudaemu/README.md). It is NOT a substitute for
// a run on a card: it checks what the kernels compute and in what order the
// engine asks for work, not speed, not the memory model of many SMs at once.
//
// Built by scripts/cudaemu.sh into one shared object installed twice, as
// libcuda.so.1 and libnvrtc.so.12, in a directory that NVMAI_CUDA_LIB_DIR
// names. "NVRTC" rewrites the CUDA source into C++ (runtime.cc and
// cudaemu.h make threads, warps and shared memory), compiles it with g++
// into a shared object, and hands that back as the "cubin"; the "driver"
// dlopens it and runs kernels block after block on one OS thread.
//
// Streams are queues. NVMAI_CUDAEMU_SCHED=eager (the default) runs each
// piece of work when it is enqueued; =lazy keeps it queued until something
// waits for it (a stream or event synchronize, an event another stream
// waits on, a free), the latest order CUDA allows: work that reads a
// result before waiting for it, or a pinned buffer reused before its copy
// ran, then shows as a wrong answer instead of a race that a fast GPU hides.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

struct emu_dim3 {
    unsigned x, y, z;
};
extern "C" void emu_launch(emu_dim3 grid, emu_dim3 block, unsigned dyn_smem_bytes, void (*body)(void*), void* ctx);
extern "C" void emu_set_launch_name(const char* name);  // runtime.cc: names the kernel in its failure messages

typedef int CUresult;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
};

namespace {

// ---------------------------------------------------------------------------
// Configuration from the environment.
uint64_t parseSize(const char* s, uint64_t def) {
    if (!s || !*s) return def;
    char* end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024.0 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    case 't': case 'T': v *= 1024.0 * 1024 * 1024 * 1024; break;
    }
    return (uint64_t)v;
}

struct Config {
    uint64_t vram;  // NVMAI_CUDAEMU_VRAM (default 80G): what cuMemGetInfo and cuDeviceTotalMem report
    int arch;       // NVMAI_CUDAEMU_ARCH (default 90): the compute capability reported
    int sms;        // NVMAI_CUDAEMU_SMS (default 132)
    bool lazy;      // NVMAI_CUDAEMU_SCHED=lazy
    bool noRegister; // NVMAI_CUDAEMU_HOSTREGISTER=0: cuMemHostRegister fails (pageable fallback)
    bool trace;     // NVMAI_CUDAEMU_TRACE=1: every launch on stderr
    Config() {
        vram = parseSize(getenv("NVMAI_CUDAEMU_VRAM"), 80ull << 30);
        const char* a = getenv("NVMAI_CUDAEMU_ARCH");
        arch = a && *a ? atoi(a) : 90;
        const char* s = getenv("NVMAI_CUDAEMU_SMS");
        sms = s && *s ? atoi(s) : 132;
        const char* sc = getenv("NVMAI_CUDAEMU_SCHED");
        lazy = sc && strcmp(sc, "lazy") == 0;
        const char* r = getenv("NVMAI_CUDAEMU_HOSTREGISTER");
        noRegister = r && strcmp(r, "0") == 0;
        const char* t = getenv("NVMAI_CUDAEMU_TRACE");
        trace = t && strcmp(t, "1") == 0;
    }
};
Config& cfg() {
    static Config c;
    return c;
}

// ---------------------------------------------------------------------------
// Memory. Device memory is host memory; a device pointer is its address.
struct Range {
    uint64_t n;
    bool device;  // cuMemAlloc (else pinned host memory: HostAlloc or HostRegister)
    bool owned;   // allocated here (HostRegister's ranges belong to the caller)
};
std::map<uint64_t, Range> ranges;  // by start address
uint64_t deviceUsed;

// find returns the range holding [p, p+n), or nullptr.
const Range* find(uint64_t p, uint64_t n) {
    auto it = ranges.upper_bound(p);
    if (it == ranges.begin()) return nullptr;
    --it;
    if (p >= it->first && p + n <= it->first + it->second.n) return &it->second;
    return nullptr;
}
bool pinned(const void* p, uint64_t n) {
    const Range* r = find((uint64_t)p, n);
    return r && !r->device;
}

void* mapBytes(uint64_t n) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
}

// ---------------------------------------------------------------------------
// Modules and kernels.
struct Kernel {
    std::string name;
    size_t (*size)();
    void (*pack)(void** params, void* dst);
    void (*exec)(const void* args, emu_dim3 grid, emu_dim3 block, unsigned smem);
    int maxDynamic = 48 * 1024;
};
struct Module {
    void* dl;
    std::map<std::string, Kernel*> kernels;
};

// ---------------------------------------------------------------------------
// Work, streams, events, graphs.
struct Stream;
struct Event;
struct Graph;
struct Op {
    enum Kind { KERNEL, COPY, MEMSET, RECORD, WAIT, GRAPH } kind;
    Kernel* k = nullptr;
    std::vector<uint8_t> args;
    emu_dim3 grid{}, block{};
    unsigned smem = 0;
    void* dst = nullptr;
    const void* src = nullptr;
    uint64_t n = 0;
    std::vector<uint8_t> staged;  // a pageable source, copied when enqueued (as the driver stages it)
    uint32_t value = 0;
    Event* ev = nullptr;
    Graph* graph = nullptr;
};
struct Stream {
    std::deque<Op> q;
    uint64_t enqueued = 0, done = 0;
    bool capturing = false;
};
struct Event {
    Stream* s = nullptr;
    uint64_t seq = 0;   // done when s->done reaches it
    double ms = 0;      // when it ran
    bool captured = false;
};
struct Graph {
    std::vector<Op> ops;
};
std::vector<Stream*> streams;
Graph* capture;  // the graph being captured, or null
CUresult captureError;

double nowMs() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void flush(Stream* s, uint64_t upto);

void run(const Op& op) {
    switch (op.kind) {
    case Op::KERNEL:
        if (cfg().trace)
            fprintf(stderr, "cudaemu: launch %s grid (%u,%u,%u) block (%u,%u,%u) smem %u\n", op.k->name.c_str(), op.grid.x,
                    op.grid.y, op.grid.z, op.block.x, op.block.y, op.block.z, op.smem);
        emu_set_launch_name(op.k->name.c_str());
        op.k->exec(op.args.data(), op.grid, op.block, op.smem);
        break;
    case Op::COPY:
        memmove(op.dst, op.staged.empty() ? op.src : op.staged.data(), op.n);
        break;
    case Op::MEMSET: {
        uint32_t* d = (uint32_t*)op.dst;
        for (uint64_t i = 0; i < op.n; i++) d[i] = op.value;
        break;
    }
    case Op::RECORD:
        op.ev->ms = nowMs();
        break;
    case Op::WAIT:
        flush(op.ev->s, op.ev->seq);
        break;
    case Op::GRAPH:
        for (const Op& g : op.graph->ops) run(g);
        break;
    }
}

void flush(Stream* s, uint64_t upto) {
    if (!s) return;
    while (s->done < upto && !s->q.empty()) {
        Op op = std::move(s->q.front());
        s->q.pop_front();
        run(op);
        s->done++;
    }
}
void flushAll() {
    for (Stream* s : streams) flush(s, s->enqueued);
}

// enqueue puts op on s: into the graph under capture, else on the queue
// (run at once unless the schedule is lazy).
CUresult enqueue(Stream* s, Op op) {
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing) {
        if (op.kind == Op::RECORD || op.kind == Op::WAIT) return CUDA_SUCCESS;  // edges, not nodes: the graph runs in order
        capture->ops.push_back(std::move(op));
        return CUDA_SUCCESS;
    }
    s->q.push_back(std::move(op));
    s->enqueued++;
    if (!cfg().lazy) flush(s, s->enqueued);
    return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// NVRTC: CUDA source to a host shared object.
struct Program {
    std::string src, name, log;
    std::vector<uint8_t> image;
};
const char kMagic[8] = {'C', 'U', 'D', 'A', 'E', 'M', 'U', '1'};

std::string selfDir() {
    Dl_info info;
    if (dladdr((void*)&selfDir, &info) && info.dli_fname) {
        std::string p = info.dli_fname;
        auto slash = p.rfind('/');
        if (slash != std::string::npos) return p.substr(0, slash);
    }
    return ".";
}

std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// launchers writes, for each extern "C" __global__ kernel of src, a struct
// of its parameters and the three entry points the driver looks up:
// __emu_size_NAME, __emu_pack_NAME (params array to the struct) and
// __emu_exec_NAME (runs the grid).
std::string launchers(const std::string& src, std::string* err) {
    std::ostringstream out;
    static const std::regex head(R"(extern\s+"C"\s+__global__\s+void\s+(__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\()");
    for (std::sregex_iterator it(src.begin(), src.end(), head), end; it != end; ++it) {
        std::string name = (*it)[2];
        size_t i = it->position() + it->length(), depth = 1, start = i;
        while (i < src.size() && depth > 0) {
            if (src[i] == '(') depth++;
            if (src[i] == ')') depth--;
            i++;
        }
        std::string params = src.substr(start, i - 1 - start);
        // A prototype (declaration ending in ';') is not a definition.
        size_t j = i;
        while (j < src.size() && isspace((unsigned char)src[j])) j++;
        if (j < src.size() && src[j] == ';') continue;
        std::vector<std::string> types, fields;
        int d = 0;
        std::string cur;
        auto take = [&](std::string p) {
            p = trim(p);
            if (p.empty() || p == "void") return;
            size_t e = p.size();
            while (e > 0 && (isalnum((unsigned char)p[e - 1]) || p[e - 1] == '_')) e--;
            std::string type = trim(p.substr(0, e));
            if (type.empty()) {
                *err += "kernel " + name + ": cannot parse parameter '" + p + "'\n";
                return;
            }
            if (type.rfind("const ", 0) == 0 && type.find('*') == std::string::npos) type = type.substr(6);
            types.push_back(type);
        };
        for (char c : params) {
            if (c == '(' || c == '<' || c == '[') d++;
            if (c == ')' || c == '>' || c == ']') d--;
            if (c == ',' && d == 0) {
                take(cur);
                cur.clear();
            } else {
                cur += c;
            }
        }
        take(cur);
        out << "\nstruct __emu_args_" << name << " {";
        for (size_t a = 0; a < types.size(); a++) out << " " << types[a] << " a" << a << ";";
        out << " };\n";
        out << "extern \"C\" __attribute__((visibility(\"default\"))) size_t __emu_size_" << name
            << "() { return sizeof(__emu_args_" << name << "); }\n";
        out << "extern \"C\" __attribute__((visibility(\"default\"))) void __emu_pack_" << name
            << "(void** p, void* dst) { __emu_args_" << name << "* s = (__emu_args_" << name << "*)dst; (void)s; (void)p;";
        for (size_t a = 0; a < types.size(); a++) out << " memcpy((void*)&s->a" << a << ", p[" << a << "], sizeof(s->a" << a << "));";
        out << " }\n";
        out << "extern \"C\" __attribute__((visibility(\"default\"))) void __emu_exec_" << name
            << "(const void* args, emu_dim3 g, emu_dim3 b, unsigned smem) { emu_launch(g, b, smem, [](void* x) { __emu_args_"
            << name << "* s = (__emu_args_" << name << "*)x; (void)s; " << name << "(";
        for (size_t a = 0; a < types.size(); a++) out << (a ? ", " : "") << "s->a" << a;
        out << "); }, (void*)args); }\n";
    }
    return out.str();
}

int runCommand(const std::string& cmd, std::string* log) {
    std::string full = cmd + " 2>&1";
    FILE* p = popen(full.c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) log->append(buf, n);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int compileProgram(Program* pr, int nopts, const char* const* opts) {
    int arch = cfg().arch;
    std::string defines;
    for (int i = 0; i < nopts; i++) {
        std::string o = opts[i];
        if (o.rfind("--gpu-architecture=sm_", 0) == 0) arch = atoi(o.c_str() + 22);
        else if (o.rfind("-arch=sm_", 0) == 0) arch = atoi(o.c_str() + 9);
        else if (o.rfind("-D", 0) == 0 || o.rfind("--define-macro=", 0) == 0) {
            std::string def = o[1] == 'D' ? o.substr(2) : o.substr(15);
            defines += " '-D" + def + "'";
        }
    }
    static const std::regex dyn(R"(extern\s+__shared__\s+(__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z_][A-Za-z0-9_]*)\s*\[\s*\]\s*;)");
    std::string src = std::regex_replace(pr->src, dyn, "$2* $3 = ($2*)__emu_dyn_smem;");
    std::string err;
    std::string gen = launchers(src, &err);
    if (!err.empty()) {
        pr->log = err;
        return 6;
    }
    char dir[] = "/tmp/cudaemu.XXXXXX";
    if (!mkdtemp(dir)) {
        pr->log = "cudaemu: mkdtemp failed";
        return 6;
    }
    std::string d = dir, cc = d + "/" + (pr->name.empty() ? std::string("kernels") : pr->name) + ".cc", so = d + "/k.so";
    {
        std::ofstream f(cc);
        f << "#line 1 \"" << pr->name << "\"\n" << src << "\n// cudaemu launchers\n" << gen;
        if (!f) {
            pr->log = "cudaemu: cannot write " + cc;
            return 6;
        }
    }
    const char* cxx = getenv("CXX");
    const char* extra = getenv("NVMAI_CUDAEMU_CXXFLAGS");
    std::string cmd = std::string(cxx && *cxx ? cxx : "g++") +
                      " -std=c++17 -O1 -g0 -fPIC -shared -fvisibility=hidden -Wl,-Bsymbolic -ffp-contract=off -fno-strict-aliasing -w -DNVMAI_EMU -D__CUDA_ARCH__=" +
                      std::to_string(arch * 10) + defines + " -include '" + selfDir() + "/cudaemu.h' " + (extra ? extra : "") +
                      " -x c++ '" + cc + "' -o '" + so + "'";
    int rc = runCommand(cmd, &pr->log);
    if (rc == 0) {
        std::ifstream f(so, std::ios::binary);
        std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        uint64_t n = bytes.size();
        pr->image.assign(kMagic, kMagic + 8);
        pr->image.insert(pr->image.end(), (uint8_t*)&n, (uint8_t*)&n + 8);
        pr->image.insert(pr->image.end(), bytes.begin(), bytes.end());
    } else {
        pr->log = "cudaemu: " + cmd + "\n" + pr->log;
    }
    if (!getenv("NVMAI_CUDAEMU_KEEP")) {
        unlink(cc.c_str());
        unlink(so.c_str());
        rmdir(dir);
    } else {
        fprintf(stderr, "cudaemu: kept %s\n", cc.c_str());
    }
    return rc == 0 ? 0 : 6;
}

const char* errorName(CUresult r) {
    switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_ILLEGAL_STATE: return "CUDA_ERROR_ILLEGAL_STATE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return "CUDA_ERROR_STREAM_CAPTURE_UNJOINED";
    }
    return "CUDA_ERROR_UNKNOWN";
}

// checkDevice says whether [p, p+n) lies in one device allocation or
// mapped pinned buffer, naming the call when not (CUDA answers
// CUDA_ERROR_INVALID_VALUE; a silent overrun here would hide a bug).
CUresult checkDevice(const char* call, uint64_t p, uint64_t n) {
    if (n == 0 || find(p, n)) return CUDA_SUCCESS;
    fprintf(stderr, "cudaemu: %s: [%#lx, +%lu) is not inside one allocation\n", call, (unsigned long)p, (unsigned long)n);
    return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

#define API extern "C" __attribute__((visibility("default")))

// ---------------------------------------------------------------------------
// Device and context.
API CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
API CUresult cuDriverGetVersion(int* v) {
    *v = 12080;
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetCount(int* n) {
    *n = 1;
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGet(int* dev, int ord) {
    if (ord != 0) return CUDA_ERROR_INVALID_VALUE;
    *dev = 0;
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetName(char* name, int n, int) {
    snprintf(name, n, "cudaemu (CPU emulation of sm_%d)", cfg().arch);
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetAttribute(int* v, int attr, int) {
    switch (attr) {
    case 75: *v = cfg().arch / 10; break;
    case 76: *v = cfg().arch % 10; break;
    case 16: *v = cfg().sms; break;
    default: *v = 0;
    }
    return CUDA_SUCCESS;
}
API CUresult cuDeviceTotalMem_v2(size_t* b, int) {
    *b = cfg().vram;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRetain(uintptr_t* ctx, int) {
    *ctx = 1;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRelease_v2(int) {
    flushAll();
    return CUDA_SUCCESS;
}
API CUresult cuCtxSetCurrent(uintptr_t) { return CUDA_SUCCESS; }
API CUresult cuCtxSynchronize() {
    flushAll();
    return CUDA_SUCCESS;
}
API CUresult cuGetErrorName(CUresult r, const char** s) {
    *s = errorName(r);
    return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Memory.
API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
    *total = cfg().vram;
    *free = cfg().vram - deviceUsed;
    return CUDA_SUCCESS;
}
API CUresult cuMemAlloc_v2(uint64_t* p, size_t n) {
    if (n == 0) return CUDA_ERROR_INVALID_VALUE;
    if (deviceUsed + n > cfg().vram) return CUDA_ERROR_OUT_OF_MEMORY;
    void* m = mapBytes(n);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    // Fresh device memory is not zero on a GPU: a pattern makes a read of
    // something never written show (large buffers stay untouched, lazily mapped).
    if (n <= (64u << 20)) memset(m, 0xCD, n);
    ranges[(uint64_t)m] = Range{n, true, true};
    deviceUsed += n;
    *p = (uint64_t)m;
    return CUDA_SUCCESS;
}
API CUresult cuMemFree_v2(uint64_t p) {
    auto it = ranges.find(p);
    if (it == ranges.end() || !it->second.device) return CUDA_ERROR_INVALID_VALUE;
    flushAll();
    munmap((void*)p, it->second.n);
    deviceUsed -= it->second.n;
    ranges.erase(it);
    return CUDA_SUCCESS;
}
API CUresult cuMemHostAlloc(void** p, size_t n, unsigned) {
    void* m = mapBytes(n);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    ranges[(uint64_t)m] = Range{n, false, true};
    *p = m;
    return CUDA_SUCCESS;
}
API CUresult cuMemHostGetDevicePointer_v2(uint64_t* d, void* p, unsigned) {
    if (!pinned(p, 1)) return CUDA_ERROR_INVALID_VALUE;
    *d = (uint64_t)p;
    return CUDA_SUCCESS;
}
API CUresult cuMemFreeHost(void* p) {
    auto it = ranges.find((uint64_t)p);
    if (it == ranges.end() || it->second.device || !it->second.owned) return CUDA_ERROR_INVALID_VALUE;
    flushAll();
    munmap(p, it->second.n);
    ranges.erase(it);
    return CUDA_SUCCESS;
}
API CUresult cuMemHostRegister_v2(void* p, size_t n, unsigned) {
    if (cfg().noRegister) return CUDA_ERROR_NOT_SUPPORTED;
    if (n == 0 || find((uint64_t)p, 1) || find((uint64_t)p + n - 1, 1)) return CUDA_ERROR_INVALID_VALUE;  // overlaps a registered range
    ranges[(uint64_t)p] = Range{n, false, false};
    return CUDA_SUCCESS;
}
API CUresult cuMemHostUnregister(void* p) {
    auto it = ranges.find((uint64_t)p);
    if (it == ranges.end() || it->second.device || it->second.owned) return CUDA_ERROR_INVALID_VALUE;
    flushAll();
    ranges.erase(it);
    return CUDA_SUCCESS;
}
API CUresult cuMemcpyDtoH_v2(void* dst, uint64_t src, size_t n) {
    // Synchronous on the legacy stream, which the engine's non-blocking
    // streams do not wait for: queued work is not flushed (the caller syncs).
    if (CUresult r = checkDevice("cuMemcpyDtoH", src, n)) return r;
    memmove(dst, (void*)src, n);
    return CUDA_SUCCESS;
}
API CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void* src, size_t n, uintptr_t s) {
    if (CUresult r = checkDevice("cuMemcpyHtoDAsync", dst, n)) return r;
    Op op;
    op.kind = Op::COPY;
    op.dst = (void*)dst;
    op.n = n;
    if (pinned(src, n)) {
        op.src = src;  // read when the copy runs: the caller must keep it until then
    } else {
        if (((Stream*)s)->capturing) {
            captureError = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            fprintf(stderr, "cudaemu: cuMemcpyHtoDAsync from pageable memory inside a graph capture\n");
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
        op.staged.assign((const uint8_t*)src, (const uint8_t*)src + n);
    }
    return enqueue((Stream*)s, std::move(op));
}
API CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, uintptr_t s) {
    if (CUresult r = checkDevice("cuMemcpyDtoDAsync (destination)", dst, n)) return r;
    if (CUresult r = checkDevice("cuMemcpyDtoDAsync (source)", src, n)) return r;
    Op op;
    op.kind = Op::COPY;
    op.dst = (void*)dst;
    op.src = (const void*)src;
    op.n = n;
    return enqueue((Stream*)s, std::move(op));
}
API CUresult cuMemsetD32Async(uint64_t dst, unsigned v, size_t n, uintptr_t s) {
    if (CUresult r = checkDevice("cuMemsetD32Async", dst, n * 4)) return r;
    Op op;
    op.kind = Op::MEMSET;
    op.dst = (void*)dst;
    op.n = n;
    op.value = v;
    return enqueue((Stream*)s, std::move(op));
}

// ---------------------------------------------------------------------------
// Streams and events.
API CUresult cuStreamCreate(uintptr_t* s, unsigned) {
    Stream* st = new Stream();
    streams.push_back(st);
    *s = (uintptr_t)st;
    return CUDA_SUCCESS;
}
API CUresult cuStreamDestroy_v2(uintptr_t s) {
    Stream* st = (Stream*)s;
    flush(st, st->enqueued);
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == st) streams.erase(streams.begin() + i);
    delete st;
    return CUDA_SUCCESS;
}
API CUresult cuStreamSynchronize(uintptr_t s) {
    Stream* st = (Stream*)s;
    if (st->capturing) return CUDA_ERROR_ILLEGAL_STATE;
    flush(st, st->enqueued);
    return CUDA_SUCCESS;
}
API CUresult cuEventCreate(uintptr_t* e, unsigned) {
    *e = (uintptr_t) new Event();
    return CUDA_SUCCESS;
}
API CUresult cuEventDestroy_v2(uintptr_t e) {
    delete (Event*)e;
    return CUDA_SUCCESS;
}
API CUresult cuEventRecord(uintptr_t e, uintptr_t s) {
    Event* ev = (Event*)e;
    Stream* st = (Stream*)s;
    if (st->capturing) {
        ev->captured = true;
        return CUDA_SUCCESS;
    }
    ev->captured = false;
    ev->s = st;
    ev->seq = st->enqueued + 1;
    Op op;
    op.kind = Op::RECORD;
    op.ev = ev;
    return enqueue(st, std::move(op));
}
API CUresult cuStreamWaitEvent(uintptr_t s, uintptr_t e, unsigned) {
    Event* ev = (Event*)e;
    Stream* st = (Stream*)s;
    if (ev->captured) {
        // CUDA's fork rule: a stream that waits on an event recorded inside
        // the capture joins it.
        if (!capture) return CUDA_ERROR_ILLEGAL_STATE;
        st->capturing = true;
        return CUDA_SUCCESS;
    }
    if (st->capturing) return CUDA_SUCCESS;  // an event from before the capture: already done by then
    Op op;
    op.kind = Op::WAIT;
    op.ev = ev;
    return enqueue(st, std::move(op));
}
API CUresult cuEventSynchronize(uintptr_t e) {
    Event* ev = (Event*)e;
    if (ev->captured) return CUDA_ERROR_ILLEGAL_STATE;
    flush(ev->s, ev->seq);
    return CUDA_SUCCESS;
}
API CUresult cuEventElapsedTime_v2(float* ms, uintptr_t a, uintptr_t b) {
    Event *ea = (Event*)a, *eb = (Event*)b;
    flush(ea->s, ea->seq);
    flush(eb->s, eb->seq);
    *ms = (float)(eb->ms - ea->ms);
    return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Graphs: the capture is a list of work in the order it was enqueued, which
// respects every edge the streams' events made.
API CUresult cuStreamBeginCapture_v2(uintptr_t s, int) {
    if (capture) return CUDA_ERROR_ILLEGAL_STATE;
    Stream* st = (Stream*)s;
    flush(st, st->enqueued);
    capture = new Graph();
    captureError = CUDA_SUCCESS;
    st->capturing = true;
    return CUDA_SUCCESS;
}
API CUresult cuStreamEndCapture(uintptr_t s, uintptr_t* g) {
    Stream* st = (Stream*)s;
    if (!capture || !st->capturing) return CUDA_ERROR_ILLEGAL_STATE;
    for (Stream* o : streams) o->capturing = false;
    Graph* gr = capture;
    capture = nullptr;
    if (captureError) {
        delete gr;
        *g = 0;
        return captureError;
    }
    *g = (uintptr_t)gr;
    return CUDA_SUCCESS;
}
API CUresult cuGraphGetNodes(uintptr_t g, uintptr_t* nodes, size_t* n) {
    Graph* gr = (Graph*)g;
    if (!nodes) {
        *n = gr->ops.size();
        return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < *n && i < gr->ops.size(); i++) nodes[i] = (uintptr_t)&gr->ops[i];
    return CUDA_SUCCESS;
}
API CUresult cuGraphInstantiateWithFlags(uintptr_t* e, uintptr_t g, unsigned long long) {
    *e = (uintptr_t) new Graph(*(Graph*)g);
    return CUDA_SUCCESS;
}
API CUresult cuGraphLaunch(uintptr_t e, uintptr_t s) {
    Op op;
    op.kind = Op::GRAPH;
    op.graph = (Graph*)e;
    if (((Stream*)s)->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return enqueue((Stream*)s, std::move(op));
}
API CUresult cuGraphExecDestroy(uintptr_t e) {
    flushAll();
    delete (Graph*)e;
    return CUDA_SUCCESS;
}
API CUresult cuGraphDestroy(uintptr_t g) {
    delete (Graph*)g;
    return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Modules and launches.
API CUresult cuModuleLoadData(uintptr_t* m, const void* image) {
    const uint8_t* b = (const uint8_t*)image;
    if (memcmp(b, kMagic, 8) != 0) {
        fprintf(stderr, "cudaemu: cuModuleLoadData: not a cudaemu image (a cubin from a real NVRTC? clear NVMAI_CUBIN_CACHE)\n");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    uint64_t n;
    memcpy(&n, b + 8, 8);
    char path[] = "/tmp/cudaemu-module.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return CUDA_ERROR_INVALID_IMAGE;
    bool ok = write(fd, b + 16, n) == (ssize_t)n;
    close(fd);
    void* dl = ok ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!dl) fprintf(stderr, "cudaemu: dlopen: %s\n", dlerror());
    unlink(path);
    if (!dl) return CUDA_ERROR_INVALID_IMAGE;
    Module* mod = new Module();
    mod->dl = dl;
    *m = (uintptr_t)mod;
    return CUDA_SUCCESS;
}
API CUresult cuModuleUnload(uintptr_t m) {
    flushAll();
    Module* mod = (Module*)m;
    for (auto& kv : mod->kernels) delete kv.second;
    // The shared object stays loaded: a graph may still name its code.
    delete mod;
    return CUDA_SUCCESS;
}
API CUresult cuModuleGetFunction(uintptr_t* f, uintptr_t m, const char* name) {
    Module* mod = (Module*)m;
    auto it = mod->kernels.find(name);
    if (it != mod->kernels.end()) {
        *f = (uintptr_t)it->second;
        return CUDA_SUCCESS;
    }
    std::string n = name;
    Kernel* k = new Kernel();
    k->name = n;
    k->size = (size_t(*)())dlsym(mod->dl, ("__emu_size_" + n).c_str());
    k->pack = (void (*)(void**, void*))dlsym(mod->dl, ("__emu_pack_" + n).c_str());
    k->exec = (void (*)(const void*, emu_dim3, emu_dim3, unsigned))dlsym(mod->dl, ("__emu_exec_" + n).c_str());
    if (!k->size || !k->pack || !k->exec) {
        delete k;
        return CUDA_ERROR_NOT_FOUND;
    }
    mod->kernels[n] = k;
    *f = (uintptr_t)k;
    return CUDA_SUCCESS;
}
API CUresult cuFuncSetAttribute(uintptr_t f, int attr, int v) {
    Kernel* k = (Kernel*)f;
    if (attr == 8) {  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        if (v < 0 || v > 227 * 1024) return CUDA_ERROR_INVALID_VALUE;
        k->maxDynamic = v;
    }
    return CUDA_SUCCESS;
}
API CUresult cuLaunchKernel(uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned smem, uintptr_t s, void** params, void** extra) {
    Kernel* k = (Kernel*)f;
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    if (extra) return CUDA_ERROR_NOT_SUPPORTED;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || (uint64_t)bx * by * bz > 1024 || gy > 65535 ||
        gz > 65535) {
        fprintf(stderr, "cudaemu: launch %s: grid (%u,%u,%u) block (%u,%u,%u) out of CUDA's limits\n", k->name.c_str(), gx, gy,
                gz, bx, by, bz);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if ((int)smem > k->maxDynamic) {
        fprintf(stderr, "cudaemu: launch %s: %u bytes of dynamic shared memory, %d allowed (cuFuncSetAttribute)\n",
                k->name.c_str(), smem, k->maxDynamic);
        return CUDA_ERROR_INVALID_VALUE;
    }
    Op op;
    op.kind = Op::KERNEL;
    op.k = k;
    op.args.resize(k->size() + 16);
    k->pack(params, op.args.data());
    op.grid = {gx, gy, gz};
    op.block = {bx, by, bz};
    op.smem = smem;
    return enqueue((Stream*)s, std::move(op));
}

// ---------------------------------------------------------------------------
// NVRTC.
API int nvrtcVersion(int* major, int* minor) {
    *major = 12;
    *minor = 99;  // no real NVRTC's: cached cubins and cudaemu images never mix
    return 0;
}
API int nvrtcCreateProgram(uintptr_t* p, const char* src, const char* name, int, const char* const*, const char* const*) {
    Program* pr = new Program();
    pr->src = src;
    pr->name = name ? name : "kernels.cu";
    *p = (uintptr_t)pr;
    return 0;
}
API int nvrtcCompileProgram(uintptr_t p, int n, const char* const* opts) { return compileProgram((Program*)p, n, opts); }
API int nvrtcGetProgramLogSize(uintptr_t p, size_t* n) {
    *n = ((Program*)p)->log.size() + 1;
    return 0;
}
API int nvrtcGetProgramLog(uintptr_t p, char* log) {
    const std::string& l = ((Program*)p)->log;
    memcpy(log, l.c_str(), l.size() + 1);
    return 0;
}
API int nvrtcGetCUBINSize(uintptr_t p, size_t* n) {
    *n = ((Program*)p)->image.size();
    return 0;
}
API int nvrtcGetCUBIN(uintptr_t p, char* out) {
    const std::vector<uint8_t>& im = ((Program*)p)->image;
    memcpy(out, im.data(), im.size());
    return 0;
}
API int nvrtcDestroyProgram(uintptr_t* p) {
    delete (Program*)*p;
    *p = 0;
    return 0;
}
API const char* nvrtcGetErrorString(int r) {
    switch (r) {
    case 0: return "NVRTC_SUCCESS";
    case 6: return "NVRTC_ERROR_COMPILATION";
    }
    return "NVRTC_ERROR";
}
