// runtime.cc: the scheduler of the CPU emulation of the project's CUDA
// kernels (tools/cudaemu; cudaemu.h is the device side). Linked into the
// fake libcuda.so.1, which is loaded RTLD_GLOBAL before a kernel .so, so the
// kernel code resolves the C symbols below from it.
//
// A launch runs its blocks one after another on the calling OS thread; the
// threads of a block are cooperative fibers, each on its own stack. A fiber
// runs until it waits at a collective (__syncthreads, a named barrier, or a
// warp collective: shuffle, vote, match, __syncwarp, ldmatrix, mma) or
// exits. A collective completes when every thread it names that still
// exists has arrived; the last arrival computes every participant's result,
// so a warp-wide instruction behaves as one instruction. If no fiber can run
// while some still wait, the block has deadlocked: the runtime says where
// each waits and aborts.
//
// The emulation exists so the GPU code can be exercised with no GPU; it is
// not a substitute for validation on a device.

#define CUDAEMU_RUNTIME_ONLY
#include "cudaemu.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#if !defined(__x86_64__) || defined(CUDAEMU_UCONTEXT)
#define EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {
__attribute__((visibility("default"))) EmuThread* __emu_cur = nullptr;
__attribute__((visibility("default"))) void* __emu_dyn_smem = nullptr;
}

namespace {

// ---- context switch ----

#if !EMU_USE_UCONTEXT
// emu_ctx_switch saves the callee-saved registers on the current stack,
// stores the stack pointer in *from and resumes the context whose stack
// pointer is to. swapcontext does the same plus a sigprocmask system call,
// about 20 times slower per switch. MXCSR and the x87 control word are not
// switched: every fiber runs with the launching thread's (kernels do not
// change rounding modes), and fnstcw/fldcw were 80% of a switch's time.
extern "C" void emu_ctx_switch(void** from, void* to);
extern "C" void emu_ctx_start();
asm(R"(
    .text
    .p2align 4
    .hidden emu_ctx_switch
    .type emu_ctx_switch,@function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch,.-emu_ctx_switch

    .p2align 4
    .hidden emu_ctx_start
    .type emu_ctx_start,@function
emu_ctx_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size emu_ctx_start,.-emu_ctx_start
)");
#endif

struct Fiber;
void fiber_main(Fiber* f);

enum State { RUNNABLE, BLOCKED, EXITED };
enum Wait { W_NONE, W_SYNCTHREADS, W_NBAR, W_WARP };
enum Kind { K_SYNCWARP, K_SHFL, K_BALLOT, K_MATCH_ANY, K_MATCH_ALL, K_LDSM, K_MMA, K_NKINDS };
const char* kind_name[K_NKINDS] = {"__syncwarp", "shfl.sync", "vote.sync (ballot/any/all)", "match.any.sync", "match.all.sync",
                                   "ldmatrix.x4", "mma.m16n8k32"};

// A cp.async the thread issued that has not landed yet: the emulation lands
// it as late as PTX allows (the cp.async.wait_group that covers its group),
// and fills its destination with 0xCD when it is issued, so shared memory
// read before the wait shows the pattern instead of the data.
struct PendingCopy {
    unsigned dst, bytes;
    const void* src;
};

struct Fiber {
    EmuThread pub; // first: the kernel code reads it through __emu_cur
    std::vector<PendingCopy> cp_open;                // issued, not yet committed
    std::vector<std::vector<PendingCopy>> cp_groups; // committed groups, oldest first
    State state;
    Wait wait;
    int wait_id; // barrier id or warp group index
    // a warp collective's inputs and outputs
    unsigned long long in_v;
    int in_mode, in_b, in_width;
    unsigned in_a[4];
    int in_bb[2], in_c[4];
    unsigned out[4];
    unsigned long long out_v;
    int out_pred;
    char* stack; // lowest usable address
#if EMU_USE_UCONTEXT
    ucontext_t uc;
#else
    void* sp;
#endif
};

struct Group {
    bool used;
    Kind kind;
    unsigned mask, arrived;
};

struct Warp {
    unsigned exist, live; // lanes inside blockDim; those not exited
    Group groups[32];
    unsigned used_mask; // bit i: groups[i].used (exits and arrivals scan only these)
};

struct NamedBar {
    int expected, count;
    std::vector<int> waiters;
};

// ---- the state of the launch and block being run (one at a time) ----

std::mutex launch_mu;
size_t stack_bytes = 0;
size_t page = 4096;
std::vector<char*> stacks; // reused across blocks and launches
std::vector<Fiber> fibers;
std::vector<Warp> warps;
NamedBar bars[16];
std::vector<int> ready; // runnable fibers, in order
size_t ready_head = 0;
int nthreads = 0, nexited = 0;
Fiber* running = nullptr;
void (*cur_body)(void*) = nullptr;
void* cur_ctx = nullptr;
char* smem = nullptr; // the shared window: dynamic shared memory at offset 0
size_t smem_cap = 0;
unsigned smem_bytes = 0;
emu_dim3 cur_grid, cur_block, cur_bidx;
std::string launch_name; // emu_set_launch_name's, for the messages; cleared after each launch

// The order runnable fibers run in. FIFO (thread order) is deterministic
// and fast, but a thread then usually runs before the threads after it, which
// can hide a missing barrier; random order (NVMAI_CUDAEMU_FIBERS=random[:seed], or
// emu_set_sched) shakes such bugs out: each pick is a random runnable fiber.
bool sched_random = false;
uint64_t sched_state = 0;
bool sched_env_read = false;

void read_sched_env() {
    if (sched_env_read) return;
    sched_env_read = true;
    const char* e = getenv("NVMAI_CUDAEMU_FIBERS");
    if (!e || !*e || !strcmp(e, "fifo")) return;
    if (!strncmp(e, "random", 6)) {
        sched_random = true;
        sched_state = e[6] == ':' ? strtoull(e + 7, nullptr, 10) : 1;
        return;
    }
    fprintf(stderr, "cudaemu: NVMAI_CUDAEMU_FIBERS=%s: want fifo, random or random:SEED\n", e);
    abort();
}

uint64_t sched_next() { // splitmix64
    uint64_t z = (sched_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#if EMU_USE_UCONTEXT
ucontext_t sched_uc;
Fiber* starting = nullptr;
void uc_entry() { fiber_main(starting); }
#else
void* sched_sp = nullptr;
#endif

// ---- diagnostics ----

std::string kernel_name() { return launch_name.empty() ? std::string("kernel") : "kernel " + launch_name; }

std::string where(const Fiber* f) {
    char b[256];
    snprintf(b, sizeof b, "%s grid", kernel_name().c_str());
    std::string head = b;
    snprintf(b, sizeof b, " (%u,%u,%u) block (%u,%u,%u): block (%u,%u,%u) thread (%u,%u,%u) (warp %u lane %u)", cur_grid.x,
             cur_grid.y, cur_grid.z, cur_block.x, cur_block.y, cur_block.z, cur_bidx.x, cur_bidx.y, cur_bidx.z,
             f ? f->pub.threadIdx.x : 0, f ? f->pub.threadIdx.y : 0, f ? f->pub.threadIdx.z : 0, f ? f->pub.warp : 0,
             f ? f->pub.lane : 0);
    return head + b;
}

[[noreturn]] void fail(const char* what, const Fiber* f) {
    fprintf(stderr, "cudaemu: %s\n  at %s\n", what, where(f).c_str());
    fflush(stderr);
    abort();
}

[[noreturn]] void deadlock() {
    fprintf(stderr,
            "cudaemu: deadlock: no thread can run and %d of %d wait (a barrier or warp collective that can never complete)\n  "
            "in %s grid (%u,%u,%u) block (%u,%u,%u), block (%u,%u,%u)\n",
            nthreads - nexited, nthreads, kernel_name().c_str(), cur_grid.x, cur_grid.y, cur_grid.z, cur_block.x, cur_block.y, cur_block.z, cur_bidx.x,
            cur_bidx.y, cur_bidx.z);
    for (size_t w = 0; w < warps.size(); w++) {
        // one line per (warp, wait) with the lanes waiting there
        struct Line {
            Wait wait;
            int id;
            unsigned lanes;
        };
        std::vector<Line> lines;
        unsigned exited = 0;
        for (int l = 0; l < 32; l++) {
            size_t t = w * 32 + l;
            if (t >= fibers.size()) break;
            const Fiber& f = fibers[t];
            if (f.state == EXITED) {
                exited |= 1u << l;
                continue;
            }
            bool found = false;
            for (auto& ln : lines)
                if (ln.wait == f.wait && ln.id == f.wait_id) ln.lanes |= 1u << l, found = true;
            if (!found) lines.push_back({f.wait, f.wait_id, 1u << l});
        }
        for (auto& ln : lines) {
            fprintf(stderr, "  warp %zu lanes %#010x wait at ", w, ln.lanes);
            if (ln.wait == W_SYNCTHREADS)
                fprintf(stderr, "__syncthreads (%d arrived; it needs every thread of the block not exited: %d)\n", bars[0].count,
                        nthreads - nexited);
            else if (ln.wait == W_NBAR)
                fprintf(stderr, "named barrier %d (%d of %d arrived)\n", ln.id, bars[ln.id].count, bars[ln.id].expected);
            else if (ln.wait == W_WARP) {
                const Group& g = warps[w].groups[ln.id];
                fprintf(stderr, "%s mask %#010x (arrived %#010x, live lanes %#010x)\n", kind_name[g.kind], g.mask, g.arrived,
                        warps[w].live);
            } else
                fprintf(stderr, "nothing (runnable?)\n");
        }
        if (exited && !lines.empty()) fprintf(stderr, "  warp %zu lanes %#010x exited\n", w, exited);
    }
    fflush(stderr);
    abort();
}

Fiber* self() {
    Fiber* f = running;
    if (!f) {
        fprintf(stderr, "cudaemu: a device function was called outside a kernel launch\n");
        abort();
    }
    return f;
}

// ---- scheduling ----

void make_runnable(int t) {
    fibers[t].state = RUNNABLE;
    fibers[t].wait = W_NONE;
    if (ready_head > 4096 && ready_head * 2 > ready.size()) {
        ready.erase(ready.begin(), ready.begin() + (long)ready_head);
        ready_head = 0;
    }
    ready.push_back(t);
}

// next_ready takes the next runnable fiber off the queue, or returns -1.
int next_ready() {
    while (ready_head < ready.size()) {
        if (sched_random) {
            size_t k = ready_head + (size_t)(sched_next() % (ready.size() - ready_head));
            std::swap(ready[ready_head], ready[k]);
        }
        int t = ready[ready_head++];
        if (fibers[t].state == RUNNABLE) return t;
    }
    return -1;
}

// switch_away leaves the running fiber f (blocked or exited) for the next
// runnable fiber directly, one switch instead of two through the
// scheduler, or for the scheduler when none can run.
void switch_away(Fiber* f) {
    int t = next_ready();
#if EMU_USE_UCONTEXT
    if (t >= 0) {
        Fiber& n = fibers[t];
        running = &n;
        __emu_cur = &n.pub;
        starting = &n;
        swapcontext(&f->uc, &n.uc);
    } else {
        swapcontext(&f->uc, &sched_uc);
    }
#else
    if (t >= 0) {
        Fiber& n = fibers[t];
        running = &n;
        __emu_cur = &n.pub;
        emu_ctx_switch(&f->sp, n.sp);
    } else {
        emu_ctx_switch(&f->sp, sched_sp);
    }
#endif
    __emu_cur = &f->pub;
    running = f;
}

// block_here parks the running fiber until make_runnable wakes it.
void block_here(Fiber* f, Wait w, int id) {
    f->state = BLOCKED;
    f->wait = w;
    f->wait_id = id;
    switch_away(f);
}

void release_bar(NamedBar& b) {
    for (int t : b.waiters) make_runnable(t);
    b.waiters.clear();
    b.count = 0;
    b.expected = 0;
}

void complete_group(int wi, Group& g);

// check_group completes g if every lane it names that still lives arrived.
bool check_group(Warp& w, int wi, Group& g) {
    unsigned need = g.mask & w.live;
    if ((g.arrived & need) != need) return false;
    complete_group(wi, g);
    return true;
}

// land_copies lands the thread's committed cp.async groups but the newest
// keep (and, with open, those not yet committed: a thread's exit).
void land_copies(Fiber* f, size_t keep, bool open) {
    auto land = [](const std::vector<PendingCopy>& g) {
        for (const PendingCopy& c : g) memcpy(smem + c.dst, c.src, c.bytes);
    };
    size_t n = f->cp_groups.size() > keep ? f->cp_groups.size() - keep : 0;
    for (size_t i = 0; i < n; i++) land(f->cp_groups[i]);
    f->cp_groups.erase(f->cp_groups.begin(), f->cp_groups.begin() + (ptrdiff_t)n);
    if (open) {
        land(f->cp_open);
        f->cp_open.clear();
    }
}

void on_exit(Fiber* f) {
    land_copies(f, 0, true);
    f->state = EXITED;
    nexited++;
    Warp& w = warps[f->pub.warp];
    w.live &= ~(1u << f->pub.lane);
    // a collective may have waited only for this lane
    for (unsigned m = w.used_mask; m; m &= m - 1) {
        Group& g = w.groups[__builtin_ctz(m)];
        if (g.used) check_group(w, (int)f->pub.warp, g);
    }
    NamedBar& b0 = bars[0];
    if (b0.expected == -1 && !b0.waiters.empty() && b0.count + nexited >= nthreads) release_bar(b0);
}

void fiber_main(Fiber* f) {
    __emu_cur = &f->pub;
    running = f;
    cur_body(cur_ctx);
    on_exit(f);
    switch_away(f);
    fail("an exited thread was resumed", f);
}

size_t stack_size() {
    if (!stack_bytes) {
        size_t kb = 256;
        if (const char* e = getenv("NVMAI_CUDAEMU_STACK_KB")) kb = strtoul(e, nullptr, 10);
        if (kb < 64) kb = 64;
        page = (size_t)sysconf(_SC_PAGESIZE);
        stack_bytes = (kb * 1024 + page - 1) / page * page;
    }
    return stack_bytes;
}

char* get_stack(size_t i) {
    while (stacks.size() <= i) {
        size_t sz = stack_size();
        // a guard page below each stack: an overflow faults instead of
        // writing into the neighbour's
        char* m = (char*)mmap(nullptr, sz + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "cudaemu: mmap of a %zu-byte fiber stack failed\n", sz);
            abort();
        }
        mprotect(m, page, PROT_NONE);
        stacks.push_back(m + page);
    }
    return stacks[i];
}

void init_fiber(Fiber& f) {
    size_t sz = stack_size();
#if EMU_USE_UCONTEXT
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack;
    f.uc.uc_stack.ss_size = sz;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, (void (*)())uc_entry, 0);
#else
    uintptr_t top = ((uintptr_t)(f.stack + sz) & ~(uintptr_t)15) - 16; // rsp after the ret: 16-aligned for the call
    uint64_t* s = (uint64_t*)top;
    *--s = (uint64_t)(uintptr_t)emu_ctx_start; // ret address
    *--s = 0;                                  // rbp
    *--s = 0;                                  // rbx
    *--s = (uint64_t)(uintptr_t)&f;            // r12: the argument
    *--s = (uint64_t)(uintptr_t)fiber_main;    // r13: the entry
    *--s = 0;                                  // r14
    *--s = 0;                                  // r15
    f.sp = s;
#endif
}

void resume(Fiber& f) {
    running = &f;
    __emu_cur = &f.pub;
#if EMU_USE_UCONTEXT
    starting = &f;
    swapcontext(&sched_uc, &f.uc);
#else
    emu_ctx_switch(&sched_sp, f.sp);
#endif
    running = nullptr;
    __emu_cur = nullptr;
}

void run_block(emu_dim3 bidx) {
    cur_bidx = bidx;
    nexited = 0;
    for (auto& b : bars) {
        b.count = 0;
        b.expected = 0;
        b.waiters.clear();
    }
    for (auto& w : warps) {
        for (auto& g : w.groups) g.used = false;
        w.used_mask = 0;
    }
    for (size_t w = 0; w < warps.size(); w++) {
        unsigned n = (unsigned)std::min<size_t>(32, nthreads - w * 32);
        warps[w].exist = warps[w].live = n == 32 ? 0xffffffffu : (1u << n) - 1;
    }
    memset(smem, 0xCD, (smem_bytes + 15) / 16 * 16); // uninitialised reads show; only this launch's part (smem_cap is the largest yet)
    ready.clear();
    ready_head = 0;
    for (int t = 0; t < nthreads; t++) {
        Fiber& f = fibers[t];
        f.pub.blockIdx = bidx;
        f.cp_open.clear();
        f.cp_groups.clear();
        f.state = RUNNABLE;
        f.wait = W_NONE;
        init_fiber(f);
        ready.push_back(t);
    }
    // Control comes back here only when no fiber can run.
    for (int t; (t = next_ready()) >= 0;) resume(fibers[t]);
    if (nexited != nthreads) deadlock();
}

// ---- warp collectives ----

unsigned lane_bit(const Fiber* f) { return 1u << f->pub.lane; }

Fiber& lane_fiber(int wi, int l) { return fibers[(size_t)wi * 32 + l]; }

// mma_product: D = A·Bt^T, 16×8 dots of 32 (no product or sum of 32 of
// them overflows 32 bits: 32·255·128 < 2^21). O3 for the vectorised dots:
// the emulated tensor-core products are most of a prefill test's time.
__attribute__((optimize("O3"))) void mma_product(const int16_t (*A)[32], const int16_t (*Bt)[32], int32_t (*D)[8]) {
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++) {
            int32_t s = 0;
            for (int k = 0; k < 32; k++) s += (int32_t)A[r][k] * (int32_t)Bt[c][k];
            D[r][c] = s;
        }
}

void complete_group(int wi, Group& g) {
    unsigned in = g.arrived; // the lanes that take part
    Kind k = g.kind;
    g.used = false;
    warps[wi].used_mask &= ~(1u << (&g - warps[wi].groups));
    switch (k) {
    case K_SYNCWARP:
        break;
    case K_SHFL:
        // PTX shfl.sync: c = ((32 - width) << 8) | (up ? 0 : 31)
        for (int l = 0; l < 32; l++) {
            if (!(in >> l & 1)) continue;
            Fiber& f = lane_fiber(wi, l);
            int width = f.in_width, b = f.in_b;
            unsigned segmask = (unsigned)(32 - width) & 31, cl = f.in_mode == 1 ? 0 : 31;
            int minLane = l & (int)segmask, maxLane = (l & (int)segmask) | (int)(cl & ~segmask);
            int j;
            bool ok;
            switch (f.in_mode) {
            case 0:
                j = minLane | (b & 31 & (int)~segmask);
                ok = j <= maxLane;
                break;
            case 1:
                j = l - b;
                ok = j >= maxLane;
                break;
            case 2:
                j = l + b;
                ok = j <= maxLane;
                break;
            default:
                j = l ^ (b & 31);
                ok = j <= maxLane;
                break;
            }
            if (!ok) j = l;
            // Reading a lane that does not take part is undefined on the
            // GPU; here it yields the reader's own value.
            f.out_v = (j >= 0 && j < 32 && (in >> j & 1)) ? lane_fiber(wi, j).in_v : f.in_v;
        }
        break;
    case K_BALLOT: {
        unsigned r = 0;
        for (int l = 0; l < 32; l++)
            if ((in >> l & 1) && lane_fiber(wi, l).in_v) r |= 1u << l;
        for (int l = 0; l < 32; l++)
            if (in >> l & 1) lane_fiber(wi, l).out[0] = r;
        break;
    }
    case K_MATCH_ANY:
        for (int l = 0; l < 32; l++) {
            if (!(in >> l & 1)) continue;
            unsigned r = 0;
            for (int j = 0; j < 32; j++)
                if ((in >> j & 1) && lane_fiber(wi, j).in_v == lane_fiber(wi, l).in_v) r |= 1u << j;
            lane_fiber(wi, l).out[0] = r;
        }
        break;
    case K_MATCH_ALL: {
        bool all = true;
        int first = __builtin_ctz(in);
        for (int l = 0; l < 32; l++)
            if ((in >> l & 1) && lane_fiber(wi, l).in_v != lane_fiber(wi, first).in_v) all = false;
        for (int l = 0; l < 32; l++)
            if (in >> l & 1) {
                lane_fiber(wi, l).out[0] = all ? in : 0;
                lane_fiber(wi, l).out_pred = all;
            }
        break;
    }
    case K_LDSM:
        // PTX ISA, ldmatrix: for .x4, threads 8j..8j+7 give the addresses of
        // rows 0..7 of matrix j; each row is 8 b16 (16 bytes); lane l
        // receives in r[j] the elements (row l/4, columns 2(l%4), 2(l%4)+1)
        // of matrix j.
        if (in != 0xffffffffu) {
            char msg[160];
            snprintf(msg, sizeof msg, "ldmatrix.sync.aligned.x4 needs all 32 lanes; lanes %#010x took part", in);
            fail(msg, running);
        }
        for (int l = 0; l < 32; l++) {
            Fiber& f = lane_fiber(wi, l);
            for (int j = 0; j < 4; j++) {
                unsigned row = (unsigned)lane_fiber(wi, 8 * j + l / 4).in_v;
                unsigned a = row + 4 * (l % 4);
                if (row % 16 != 0 || (size_t)row + 16 > smem_bytes) {
                    char msg[200];
                    snprintf(msg, sizeof msg,
                             "ldmatrix: row address %#x (lane %d) is not a 16-byte aligned row inside the %u bytes of dynamic shared "
                             "memory",
                             row, 8 * j + l / 4, smem_bytes);
                    fail(msg, &lane_fiber(wi, 8 * j + l / 4));
                }
                memcpy(&f.out[j], smem + a, 4);
            }
        }
        break;
    case K_MMA: {
        // mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32, fragments from the
        // PTX ISA section "Matrix Fragments for mma.m16n8k32" (integer
        // .u8/.s8 types); gid = lane/4, tq = lane%4:
        //  A (16x32 u8, row): a0: row gid,   k 4tq..4tq+3;  a1: row gid+8, k 4tq..4tq+3;
        //                     a2: row gid,   k 16+4tq..;    a3: row gid+8, k 16+4tq..
        //                     (byte i of a register is k + i)
        //  B (32x8 s8, col):  b0: col gid, k 4tq..4tq+3;  b1: col gid, k 16+4tq..
        //  C/D (16x8 s32):    c0,c1: row gid, cols 2tq, 2tq+1; c2,c3: row gid+8, same cols
        if (in != 0xffffffffu) {
            char msg[160];
            snprintf(msg, sizeof msg, "mma.sync.aligned needs all 32 lanes; lanes %#010x took part", in);
            fail(msg, running);
        }
        int16_t A[16][32], Bt[8][32]; // Bt: B transposed, a column's k contiguous
        for (int l = 0; l < 32; l++) {
            Fiber& f = lane_fiber(wi, l);
            int gid = l >> 2, tq = l & 3;
            for (int r = 0; r < 4; r++)
                for (int i = 0; i < 4; i++) {
                    int row = gid + ((r & 1) ? 8 : 0), kk = 4 * tq + i + ((r & 2) ? 16 : 0);
                    A[row][kk] = (uint8_t)(f.in_a[r] >> (8 * i));
                }
            for (int r = 0; r < 2; r++)
                for (int i = 0; i < 4; i++) Bt[gid][4 * tq + i + 16 * r] = (int8_t)((unsigned)f.in_bb[r] >> (8 * i));
        }
        int32_t D[16][8];
        mma_product(A, Bt, D);
        for (int l = 0; l < 32; l++) {
            Fiber& f = lane_fiber(wi, l);
            int gid = l >> 2, tq = l & 3;
            for (int r = 0; r < 4; r++) {
                int row = gid + (r >= 2 ? 8 : 0), col = 2 * tq + (r & 1);
                // s32 accumulation wraps (no .satfinite)
                f.out[r] = (unsigned)f.in_c[r] + (unsigned)D[row][col];
            }
        }
        break;
    }
    default:
        break;
    }
    for (int l = 0; l < 32; l++) {
        if (!(in >> l & 1)) continue;
        Fiber& f = lane_fiber(wi, l);
        if (&f != running && f.state == BLOCKED) make_runnable((int)(&f - fibers.data()));
    }
}

// collective: the running lane joins the group of its warp for (kind,
// mask), completing it or waiting for the others.
void collective(Fiber* f, Kind kind, unsigned mask) {
    unsigned me = lane_bit(f);
    if (!(mask & me)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s with mask %#010x that leaves out the calling lane", kind_name[kind], mask);
        fail(msg, f);
    }
    int wi = (int)f->pub.warp;
    Warp& w = warps[wi];
    Group* g = nullptr;
    int gi = -1;
    for (unsigned m = w.used_mask; m; m &= m - 1) {
        int i = __builtin_ctz(m);
        Group& c = w.groups[i];
        if (c.kind == kind && c.mask == mask && !(c.arrived & me)) {
            g = &c;
            gi = i;
            break;
        }
    }
    if (!g) {
        // a free group exists: each used one holds a waiting lane, and this
        // lane waits in none
        gi = __builtin_ctz(~w.used_mask);
        g = &w.groups[gi];
        w.used_mask |= 1u << gi;
        g->used = true;
        g->kind = kind;
        g->mask = mask;
        g->arrived = 0;
    }
    g->arrived |= me;
    if (check_group(w, wi, *g)) return;
    block_here(f, W_WARP, gi);
}

void bar_wait(Fiber* f, int id, int n, bool wait) {
    if (id < 0 || id > 15) {
        char msg[96];
        snprintf(msg, sizeof msg, "barrier id %d outside 0..15", id);
        fail(msg, f);
    }
    int rounded = (nthreads + 31) / 32 * 32;
    if (n <= 0 || n % 32 != 0 || n > rounded) {
        char msg[160];
        snprintf(msg, sizeof msg, "barrier %d: thread count %d is not a positive multiple of 32 up to the block's %d", id, n, rounded);
        fail(msg, f);
    }
    NamedBar& b = bars[id];
    if (b.count == 0 && b.waiters.empty())
        b.expected = n;
    else if (b.expected != n) {
        char msg[160];
        snprintf(msg, sizeof msg, "barrier %d used with thread count %d while %d threads are expected (%d arrived)", id, n, b.expected,
                 b.count);
        fail(msg, f);
    }
    b.count++;
    if (b.count >= b.expected) {
        release_bar(b);
        return;
    }
    if (wait) {
        b.waiters.push_back((int)f->pub.tid);
        block_here(f, W_NBAR, id);
    }
}

} // namespace

// ---- exported: launch ----

EMU_EXPORT void emu_launch(emu_dim3 grid, emu_dim3 block, unsigned dyn_smem_bytes, void (*body)(void*), void* ctx) {
    std::lock_guard<std::mutex> lock(launch_mu);
    read_sched_env();
    unsigned long long n = (unsigned long long)block.x * block.y * block.z;
    if (n == 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
        fprintf(stderr, "cudaemu: launch with grid (%u,%u,%u) block (%u,%u,%u): empty or over 1024 threads a block\n", grid.x, grid.y,
                grid.z, block.x, block.y, block.z);
        abort();
    }
    cur_grid = grid;
    cur_block = block;
    cur_body = body;
    cur_ctx = ctx;
    nthreads = (int)n;
    size_t need = ((size_t)dyn_smem_bytes + 15) / 16 * 16;
    if (need < 16) need = 16;
    if (need > smem_cap) {
        free(smem);
        smem = (char*)aligned_alloc(128, (need + 127) / 128 * 128);
        if (!smem) {
            fprintf(stderr, "cudaemu: cannot allocate %u bytes of shared memory\n", dyn_smem_bytes);
            abort();
        }
        smem_cap = (need + 127) / 128 * 128;
    }
    smem_bytes = dyn_smem_bytes;
    __emu_dyn_smem = smem;
    fibers.assign((size_t)n, Fiber{});
    warps.assign(((size_t)n + 31) / 32, Warp{});
    for (unsigned t = 0; t < n; t++) {
        Fiber& f = fibers[t];
        f.pub.threadIdx = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
        f.pub.blockDim = block;
        f.pub.gridDim = grid;
        f.pub.tid = t;
        f.pub.lane = t % 32;
        f.pub.warp = t / 32;
        f.stack = get_stack(t);
    }
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) run_block({x, y, z});
    __emu_dyn_smem = nullptr;
    __emu_cur = nullptr;
    launch_name.clear();
}

// emu_set_launch_name names the next emu_launch's kernel in the messages
// of a deadlock, trap or bad access (optional; the driver knows the name,
// the runtime does not).
EMU_EXPORT void emu_set_launch_name(const char* name) {
    std::lock_guard<std::mutex> lock(launch_mu);
    launch_name = name ? name : "";
}

// emu_set_sched picks the order runnable fibers run in: 0 FIFO (thread
// order, the default), 1 random from seed (as NVMAI_CUDAEMU_FIBERS=random:SEED).
EMU_EXPORT void emu_set_sched(int mode, unsigned long long seed) {
    std::lock_guard<std::mutex> lock(launch_mu);
    sched_env_read = true;
    sched_random = mode == 1;
    sched_state = seed;
}

// ---- exported: what cudaemu.h calls ----

EMU_EXPORT void emu_syncthreads(void) {
    Fiber* f = self();
    NamedBar& b = bars[0];
    if (b.count == 0 && b.waiters.empty())
        b.expected = -1; // every thread not exited
    else if (b.expected != -1)
        fail("__syncthreads on barrier 0 while a named barrier.sync 0 with a thread count is pending", f);
    b.count++;
    if (b.count + nexited >= nthreads) {
        release_bar(b);
        return;
    }
    b.waiters.push_back((int)f->pub.tid);
    block_here(f, W_SYNCTHREADS, 0);
}

EMU_EXPORT void emu_bar_sync(int id, int n) { bar_wait(self(), id, n, true); }
EMU_EXPORT void emu_bar_arrive(int id, int n) { bar_wait(self(), id, n, false); }

EMU_EXPORT void emu_syncwarp(unsigned mask) { collective(self(), K_SYNCWARP, mask); }

EMU_EXPORT unsigned long long emu_shfl(unsigned mask, unsigned long long v, int mode, int b, int width) {
    Fiber* f = self();
    if (width < 1 || width > 32 || (width & (width - 1))) fail("shuffle width is not a power of two in 1..32", f);
    f->in_v = v;
    f->in_mode = mode;
    f->in_b = b;
    f->in_width = width;
    collective(f, K_SHFL, mask);
    return f->out_v;
}

EMU_EXPORT unsigned emu_ballot(unsigned mask, int pred) {
    Fiber* f = self();
    f->in_v = pred != 0;
    collective(f, K_BALLOT, mask);
    return f->out[0];
}

EMU_EXPORT unsigned emu_match_any(unsigned mask, unsigned long long v) {
    Fiber* f = self();
    f->in_v = v;
    collective(f, K_MATCH_ANY, mask);
    return f->out[0];
}

EMU_EXPORT unsigned emu_match_all(unsigned mask, unsigned long long v, int* pred) {
    Fiber* f = self();
    f->in_v = v;
    collective(f, K_MATCH_ALL, mask);
    if (pred) *pred = f->out_pred;
    return f->out[0];
}

EMU_EXPORT void emu_ldmatrix_x4(unsigned r[4], unsigned addr) {
    Fiber* f = self();
    f->in_v = addr;
    collective(f, K_LDSM, 0xffffffffu);
    for (int j = 0; j < 4; j++) r[j] = f->out[j];
}

EMU_EXPORT void emu_mma_m16n8k32_u8s8(int d[4], const unsigned a[4], const int b[2]) {
    Fiber* f = self();
    for (int i = 0; i < 4; i++) {
        f->in_a[i] = a[i];
        f->in_c[i] = d[i];
    }
    f->in_bb[0] = b[0];
    f->in_bb[1] = b[1];
    collective(f, K_MMA, 0xffffffffu);
    for (int i = 0; i < 4; i++) d[i] = (int)f->out[i];
}

EMU_EXPORT unsigned emu_smem_addr(const void* p) {
    Fiber* f = self();
    const char* c = (const char*)p;
    if (c < smem || c > smem + smem_bytes) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "cvta.to.shared of %p: not inside the block's %u bytes of dynamic shared memory at %p (the emulation's shared "
                 "window holds only the dynamic shared memory)",
                 p, smem_bytes, (void*)smem);
        fail(msg, f);
    }
    return (unsigned)(c - smem);
}

// NVMAI_CUDAEMU_CPASYNC=eager lands every cp.async as it is issued (the
// emulation before session 19); the default lands each at its wait.
bool cp_async_eager() {
    static int eager = -1;
    if (eager < 0) {
        const char* e = getenv("NVMAI_CUDAEMU_CPASYNC");
        eager = e && !strcmp(e, "eager");
    }
    return eager;
}

EMU_EXPORT void emu_cp_async(unsigned dst, const void* src, unsigned bytes) {
    Fiber* f = self();
    if ((size_t)dst + bytes > smem_bytes || dst % bytes != 0 || ((uintptr_t)src % bytes) != 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "cp.async of %u bytes to shared %#x from %p: misaligned or past the %u bytes of dynamic shared memory",
                 bytes, dst, src, smem_bytes);
        fail(msg, f);
    }
    if (cp_async_eager()) {
        memcpy(smem + dst, src, bytes);
        return;
    }
    memset(smem + dst, 0xCD, bytes);
    f->cp_open.push_back({dst, bytes, src});
}

EMU_EXPORT void emu_cp_async_commit(void) {
    Fiber* f = self();
    f->cp_groups.push_back(std::move(f->cp_open));
    f->cp_open.clear();
}

EMU_EXPORT void emu_cp_async_wait(int n) {
    Fiber* f = self();
    land_copies(f, n < 0 ? 0 : (size_t)n, false);
}

EMU_EXPORT void emu_trap(const char* what) {
    char msg[300];
    snprintf(msg, sizeof msg, "trap: %s", what);
    fail(msg, running);
}

// emu_bench_switch times n round trips scheduler -> fiber -> scheduler on
// one fiber (2n switches) and returns nanoseconds a switch.
EMU_EXPORT double emu_bench_switch(int n);

namespace {
int bench_left;
void bench_body(void*) {
    Fiber* f = running;
    while (bench_left > 0) {
        bench_left--;
        f->state = BLOCKED;
        f->wait = W_NBAR;
#if EMU_USE_UCONTEXT
        swapcontext(&f->uc, &sched_uc);
#else
        emu_ctx_switch(&f->sp, sched_sp);
#endif
        running = f;
    }
}
} // namespace

#include <time.h>
EMU_EXPORT double emu_bench_switch(int n) {
    std::lock_guard<std::mutex> lock(launch_mu);
    fibers.assign(1, Fiber{});
    warps.assign(1, Warp{});
    Fiber& f = fibers[0];
    f.stack = get_stack(0);
    cur_body = bench_body;
    cur_ctx = nullptr;
    nthreads = 1;
    nexited = 0;
    bench_left = n;
    ready.clear();
    ready_head = 0;
    init_fiber(f);
    timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    while (f.state != EXITED) {
        f.state = RUNNABLE;
        resume(f);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    return ns / (2.0 * (n + 1));
}
