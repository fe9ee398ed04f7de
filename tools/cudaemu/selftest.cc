// selftest.cc: checks the CPU emulation's runtime (runtime.cc, cudaemu.h)
// with small kernels launched through emu_launch directly: barriers, warp
// collectives with CUDA's exact semantics, the integer mma and ldmatrix
// fragment layouts, cp.async into dynamic shared memory, and that a deadlock
// or a trap aborts with a message. Built and run by selftest.sh, with the
// same flags the emulated NVRTC uses for kernels.
//
// usage: selftest [kernel.so ...]  (each .so is dlopened RTLD_NOW: every
// symbol the real kernels need must resolve from this runtime)

#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

// After the standard headers: cudaemu.h's keyword macros (__noinline__ and
// the like) must not reach them. The emulated NVRTC -includes it instead:
// the kernel sources include nothing.
#include "cudaemu.h"

extern "C" double emu_bench_switch(int n);

static int failures = 0;
#define CHECK(cond, ...)                                       \
    do {                                                       \
        if (!(cond)) {                                         \
            if (failures < 20) {                               \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
                fprintf(stderr, __VA_ARGS__);                  \
                fprintf(stderr, "\n");                         \
            }                                                  \
            failures++;                                        \
        }                                                      \
    } while (0)

// launch runs fn as a kernel: the lambda is the body of every thread.
static void launch(emu_dim3 grid, emu_dim3 block, unsigned smem, const std::function<void()>& fn) {
    emu_launch(grid, block, smem, [](void* c) { (*(const std::function<void()>*)c)(); }, (void*)&fn);
}

static double now_s() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static unsigned tid_of() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

// ---- __syncthreads ordering with shared arrays, 3-D blocks, several blocks ----
static void test_syncthreads() {
    const emu_dim3 grid{3, 2, 1}, block{16, 8, 2};
    const int n = 256, nb = 6;
    std::vector<int> out(nb * n * 3, -1);
    launch(grid, block, 0, [&] {
        __shared__ int a[256];
        __shared__ int b[256];
        unsigned t = tid_of(), bid = blockIdx.x + gridDim.x * blockIdx.y;
        a[t] = (int)(t * 3 + bid);
        __syncthreads();
        b[t] = a[(t + 1) % n] + a[(t + n - 1) % n]; // neighbours written before the barrier
        __syncthreads();
        int s = 0;
        for (int i = 0; i < n; i++) s += b[i]; // every write of phase 2 visible
        __syncthreads();
        a[n - 1 - t] = (int)t; // reversed, after everyone finished reading
        __syncthreads();
        out[(bid * n + t) * 3 + 0] = b[t];
        out[(bid * n + t) * 3 + 1] = s;
        out[(bid * n + t) * 3 + 2] = a[t];
    });
    for (int bid = 0; bid < nb; bid++) {
        long sum = 0;
        for (int t = 0; t < n; t++) sum += ((t + 1) % n) * 3 + ((t + n - 1) % n) * 3 + 2 * bid;
        for (int t = 0; t < n; t++) {
            int e = ((t + 1) % n) * 3 + bid + ((t + n - 1) % n) * 3 + bid;
            CHECK(out[(bid * n + t) * 3 + 0] == e, "syncthreads: block %d thread %d neighbour sum %d, want %d", bid, t,
                  out[(bid * n + t) * 3], e);
            CHECK(out[(bid * n + t) * 3 + 1] == sum, "syncthreads: block %d thread %d total %d, want %ld", bid, t,
                  out[(bid * n + t) * 3 + 1], sum);
            CHECK(out[(bid * n + t) * 3 + 2] == n - 1 - t, "syncthreads: reversed write");
        }
    }
    // Threads that exit early count as arrived: the rest must not hang.
    int done = 0;
    launch({1, 1, 1}, {96, 1, 1}, 0, [&] {
        if (threadIdx.x % 3 == 0) return;
        __syncthreads();
        __syncthreads();
        atomicAdd(&done, 1);
    });
    CHECK(done == 64, "syncthreads after exits: %d threads finished, want 64", done);
    // ... also when the last of them exits while the others already wait.
    done = 0;
    launch({1, 1, 1}, {96, 1, 1}, 0, [&] {
        __syncthreads();
        if (threadIdx.x >= 64) return;
        __syncthreads();
        atomicAdd(&done, 1);
    });
    CHECK(done == 64, "syncthreads released by an exit: %d threads finished, want 64", done);
}

// ---- shuffles: exact semantics incl. width segments and out-of-range lanes ----
static void test_shuffles() {
    const int N = 64; // two warps
    std::vector<long long> vin(N);
    std::mt19937_64 rng(1);
    for (auto& v : vin) v = (long long)(rng() % 100000) - 50000;
    struct Res {
        long long idx8, up16, down8, xor8_4, xor8_16, xorfull, downred8;
        int idx_any;
        float fsum;
        double dsum;
    };
    std::vector<Res> r(N);
    launch({1, 1, 1}, {N, 1, 1}, 0, [&] {
        int t = threadIdx.x, lane = t & 31;
        long long v = vin[t];
        Res& o = r[t];
        o.idx8 = __shfl_sync(0xffffffffu, v, 11, 8);     // lane 3 of each 8-segment
        o.idx_any = __shfl_sync(0xffffffffu, (int)v, 37); // 37 & 31 = lane 5
        o.up16 = __shfl_up_sync(0xffffffffu, v, 3, 16);
        o.down8 = __shfl_down_sync(0xffffffffu, v, 5, 8);
        o.xor8_4 = __shfl_xor_sync(0xffffffffu, v, 4, 8);
        o.xor8_16 = __shfl_xor_sync(0xffffffffu, v, 16, 8); // a later segment: own value; an earlier one: read
        long long s = v;
        for (int m = 16; m; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
        o.xorfull = s;
        long long d = v; // segment reduction into lane 0 of each 8-lane segment
        for (int m = 4; m; m >>= 1) d += __shfl_down_sync(0xffffffffu, d, m, 8);
        o.downred8 = d;
        float f = (float)v * 0.25f;
        for (int m = 16; m; m >>= 1) f = __fadd_rn(f, __shfl_xor_sync(0xffffffffu, f, m));
        o.fsum = f;
        double dd = (double)v * 0.5;
        for (int m = 1; m < 32; m <<= 1) dd += __shfl_down_sync(0xffffffffu, dd, m);
        o.dsum = dd;
        (void)lane;
    });
    for (int t = 0; t < N; t++) {
        int lane = t & 31, w0 = t - lane;
        auto V = [&](int l) { return vin[w0 + l]; };
        int seg8 = lane & ~7, seg16 = lane & ~15;
        CHECK(r[t].idx8 == V(seg8 + 3), "shfl idx width 8 lane %d", t);
        CHECK(r[t].idx_any == (int)V(5), "shfl idx lane 37 lane %d", t);
        CHECK(r[t].up16 == (lane - seg16 >= 3 ? V(lane - 3) : V(lane)), "shfl up width 16 lane %d", t);
        CHECK(r[t].down8 == (lane - seg8 + 5 < 8 ? V(lane + 5) : V(lane)), "shfl down width 8 lane %d", t);
        CHECK(r[t].xor8_4 == V(lane ^ 4), "shfl xor 4 width 8 lane %d", t);
        int j = lane ^ 16;
        CHECK(r[t].xor8_16 == (j < seg8 + 8 ? V(j) : V(lane)), "shfl xor 16 width 8 lane %d: got %lld", t, r[t].xor8_16);
        long long full = 0;
        for (int l = 0; l < 32; l++) full += V(l);
        CHECK(r[t].xorfull == full, "xor reduction lane %d", t);
        if (lane % 8 == 0) {
            long long e = 0;
            for (int l = 0; l < 8; l++) e += V(lane + l);
            CHECK(r[t].downred8 == e, "down reduction width 8 lane %d: %lld want %lld", t, r[t].downred8, e);
        }
        if (lane == 0) {
            // float butterfly: every lane the same value; the order of the
            // tree is the butterfly's, so compare with it computed here
            float f[32];
            for (int l = 0; l < 32; l++) f[l] = (float)V(l) * 0.25f;
            for (int m = 16; m; m >>= 1) {
                float g[32];
                for (int l = 0; l < 32; l++) g[l] = f[l] + f[l ^ m];
                memcpy(f, g, sizeof f);
            }
            for (int l = 0; l < 32; l++) CHECK(r[w0 + l].fsum == f[0], "float xor reduction lane %d", w0 + l);
            double d[32];
            for (int l = 0; l < 32; l++) d[l] = (double)V(l) * 0.5;
            for (int m = 1; m < 32; m <<= 1) {
                double g[32];
                for (int l = 0; l < 32; l++) g[l] = d[l] + (l + m < 32 ? d[l + m] : d[l]);
                memcpy(d, g, sizeof d);
            }
            CHECK(r[t].dsum == d[0], "double down reduction: %g want %g", r[t].dsum, d[0]);
        }
    }
}

// ---- ballot, any, all, match_any; partial last warp (blockDim 48) ----
static void test_votes() {
    const int N = 48;
    std::vector<unsigned> bal(N), anyv(N), allv(N), match(N), full(N), sub(N);
    std::vector<int> down(N);
    launch({1, 1, 1}, {N, 1, 1}, 0, [&] {
        int t = threadIdx.x, lane = t & 31;
        bal[t] = __ballot_sync(0xffffffffu, lane % 3 == 0);
        anyv[t] = __any_sync(0xffffffffu, lane == 7);
        allv[t] = __all_sync(0xffffffffu, lane < 40);
        match[t] = __match_any_sync(0xffffffffu, lane % 5);
        full[t] = __ballot_sync(0xffffffffu, 1); // partial warp: only its 16 lanes
        if (lane < 16) sub[t] = __ballot_sync(0x0000ffffu, lane & 1); // a mask of half the warp
        __syncwarp();
        down[t] = __shfl_down_sync(0xffffffffu, t, 1);
    });
    for (int t = 0; t < N; t++) {
        int lane = t & 31, w = t / 32;
        unsigned exist = w == 0 ? 0xffffffffu : 0xffffu;
        unsigned e = 0;
        for (int l = 0; l < 32; l++)
            if ((exist >> l & 1) && l % 3 == 0) e |= 1u << l;
        CHECK(bal[t] == e, "ballot lane %d: %#x want %#x", t, bal[t], e);
        CHECK(anyv[t] == 1, "any lane %d", t);
        CHECK(allv[t] == 1, "all lane %d", t);
        unsigned m = 0;
        for (int l = 0; l < 32; l++)
            if ((exist >> l & 1) && l % 5 == lane % 5) m |= 1u << l;
        CHECK(match[t] == m, "match_any lane %d: %#x want %#x", t, match[t], m);
        CHECK(full[t] == exist, "ballot of a partial warp lane %d: %#x", t, full[t]);
        if (lane < 16) CHECK(sub[t] == 0xaaaau, "ballot with a half mask lane %d: %#x", t, sub[t]);
        if ((lane < 31 && w == 0) || (w == 1 && lane < 15)) CHECK(down[t] == t + 1, "down in partial warp lane %d", t);
    }
}

// ---- named barriers: a hand-off chain between warps (as gdn_rec_reg) ----
static void test_named_barriers() {
    const int W = 4, IT = 20;
    std::vector<int> out(W * 32);
    launch({1, 1, 1}, {W * 32, 1, 1}, 0, [&] {
        __shared__ int buf[W + 1][32];
        int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (w == 0) buf[0][lane] = lane;
        for (int it = 0; it < IT; it++) {
            // warp w waits for warp w-1 (barrier w, 64 threads: 32 arrive, 32 sync);
            // warp 0 waits for the last warp's previous round (barrier W).
            if (w > 0)
                emu_bar_sync(w, 64);
            else if (it > 0)
                emu_bar_sync(W, 64);
            int prev = w > 0 ? buf[w - 1][lane] : (it > 0 ? buf[W - 1][lane] : 0);
            buf[w][lane] = prev + w + 1 + (w == 0 && it == 0 ? lane : 0);
            if (w < W - 1)
                emu_bar_arrive(w + 1, 64);
            else if (it < IT - 1)
                emu_bar_arrive(W, 64);
        }
        __syncthreads();
        out[threadIdx.x] = buf[w][lane];
    });
    for (int w = 0; w < W; w++)
        for (int l = 0; l < 32; l++) {
            // each round adds 1+2+...+W; the last round stops at warp w
            int e = l + (IT - 1) * (W * (W + 1) / 2) + (w + 1) * (w + 2) / 2;
            CHECK(out[w * 32 + l] == e, "named barrier chain warp %d lane %d: %d want %d", w, l, out[w * 32 + l], e);
        }
}

// ---- integer mma m16n8k32 u8 x s8 against a naive product ----
// Fragment layouts: PTX ISA, "Matrix Fragments for mma.m16n8k32" (the .u8/.s8
// integer types; sections 9.7.13.4.x of ISA 8.x): gid = lane/4, tq = lane%4.
// These tables are the test's own statement of that layout; the runtime's
// mma and the kernels (kernels.cu's comment above mma_u8s8) must agree.
static void a_coord(int lane, int reg, int byte, int* row, int* k) {
    *row = (lane >> 2) + ((reg & 1) ? 8 : 0);
    *k = 4 * (lane & 3) + byte + ((reg & 2) ? 16 : 0);
}
static void b_coord(int lane, int reg, int byte, int* k, int* col) {
    *k = 4 * (lane & 3) + byte + 16 * reg;
    *col = lane >> 2;
}
static void c_coord(int lane, int reg, int* row, int* col) {
    *row = (lane >> 2) + (reg >= 2 ? 8 : 0);
    *col = 2 * (lane & 3) + (reg & 1);
}

static void test_mma() {
    std::mt19937 rng(7);
    for (int rep = 0; rep < 4; rep++) {
        uint8_t A[16][32];
        int8_t B[32][8];
        int C[16][8];
        for (auto& r : A)
            for (auto& v : r) v = (uint8_t)rng();
        for (auto& r : B)
            for (auto& v : r) v = (int8_t)rng();
        for (auto& r : C)
            for (auto& v : r) v = (int)(rng() % 2000001) - 1000000;
        if (rep == 3) // the extremes: 32·255·(-128) and overflow-free max
            for (int i = 0; i < 16; i++)
                for (int k = 0; k < 32; k++) A[i][k] = 255, B[k][i % 8] = (int8_t)(i & 1 ? 127 : -128);
        unsigned af[32][4];
        int bf[32][2], cf[32][4];
        for (int l = 0; l < 32; l++) {
            for (int r = 0; r < 4; r++) {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    int row, k;
                    a_coord(l, r, i, &row, &k);
                    v |= (unsigned)A[row][k] << (8 * i);
                }
                af[l][r] = v;
                int row, col;
                c_coord(l, r, &row, &col);
                cf[l][r] = C[row][col];
            }
            for (int r = 0; r < 2; r++) {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    int k, col;
                    b_coord(l, r, i, &k, &col);
                    v |= (unsigned)(uint8_t)B[k][col] << (8 * i);
                }
                bf[l][r] = (int)v;
            }
        }
        int df[32][4];
        launch({1, 1, 1}, {32, 1, 1}, 0, [&] {
            int l = threadIdx.x;
            int d[4] = {cf[l][0], cf[l][1], cf[l][2], cf[l][3]};
            emu_mma_u8s8(d, af[l], bf[l]);
            memcpy(df[l], d, sizeof d);
        });
        for (int l = 0; l < 32; l++)
            for (int r = 0; r < 4; r++) {
                int row, col;
                c_coord(l, r, &row, &col);
                int e = C[row][col];
                for (int k = 0; k < 32; k++) e += (int)A[row][k] * (int)B[k][col];
                CHECK(df[l][r] == e, "mma rep %d lane %d reg %d (row %d col %d): %d want %d", rep, l, r, row, col, df[l][r], e);
            }
    }
}

// ---- ldmatrix .x4 on a known shared tile, rows at scattered addresses ----
static void test_ldmatrix() {
    // 4 matrices x 8 rows of 16 bytes, placed at a permuted order in 1 KiB
    const unsigned smem = 1024;
    unsigned got[32][4];
    auto row_slot = [](int j, int row) { return ((j * 8 + row) * 5 + 3) % 64; }; // a permutation of 64 slots of 16 bytes
    launch({1, 1, 1}, {32, 1, 1}, smem, [&] {
        unsigned short* sm = (unsigned short*)__emu_dyn_smem;
        int l = threadIdx.x;
        // each lane fills two matrix rows: value (j<<8)|(row<<4)|col
        for (int q = 0; q < 2; q++) {
            int jr = 2 * l + q, j = jr / 8, row = jr % 8;
            for (int c = 0; c < 8; c++) sm[row_slot(j, row) * 8 + c] = (unsigned short)((j << 8) | (row << 4) | c);
        }
        __syncwarp();
        int j = l / 8, row = l % 8;
        unsigned r[4];
        emu_ldsm_x4(r, emu_cvta_shared(sm + row_slot(j, row) * 8));
        memcpy(got[l], r, sizeof r);
    });
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < 4; j++) {
            int row = l / 4, c = 2 * (l % 4);
            unsigned e = (unsigned)((j << 8) | (row << 4) | c) | ((unsigned)((j << 8) | (row << 4) | (c + 1)) << 16);
            CHECK(got[l][j] == e, "ldmatrix lane %d matrix %d: %#x want %#x", l, j, got[l][j], e);
        }
}

// ---- cp.async into dynamic shared memory; uninitialised smem is 0xCD ----
static void test_cp_async() {
    const int n = 512; // floats
    std::vector<float> src(n), out(n);
    for (int i = 0; i < n; i++) src[i] = (float)i * 1.5f;
    std::vector<unsigned> garbage(2);
    launch({2, 1, 1}, {64, 1, 1}, n * 4 + 64, [&] {
        float* sm = (float*)__emu_dyn_smem;
        int t = threadIdx.x;
        if (blockIdx.x == 1 && t == 0) {
            unsigned g;
            memcpy(&g, (char*)sm + n * 4, 4);
            garbage[0] = g; // past what block 0 wrote: the pattern again
        }
        for (int i = t; i < n / 4; i += blockDim.x) emu_cp_async(emu_cvta_shared(sm + 4 * i), &src[4 * i], 16);
        if (t < 16) emu_cp_async(emu_cvta_shared((char*)sm + n * 4 + 4 * t), &src[t], 4);
        emu_cp_async_commit();
        emu_cp_async_wait(0);
        __syncthreads();
        if (blockIdx.x == 0)
            for (int i = t; i < n; i += blockDim.x) out[i] = sm[(i + 1) % n] + ((float*)((char*)sm + n * 4))[i % 16];
    });
    for (int i = 0; i < n; i++) CHECK(out[i] == src[(i + 1) % n] + src[i % 16], "cp.async element %d", i);
    CHECK(garbage[0] == 0xCDCDCDCDu, "dynamic shared memory not refilled with 0xCD between blocks: %#x", garbage[0]);

    // A copy lands only at the cp.async.wait_group that covers its group
    // (as late as PTX allows); until then its destination reads 0xCD, so a
    // kernel that reads before it waits fails its checks. wait_group 1
    // lands every group but the newest.
    unsigned seen[5] = {};
    launch({1, 1, 1}, {32, 1, 1}, 64, [&] {
        float* sm = (float*)__emu_dyn_smem;
        int t = threadIdx.x;
        if (t == 0) {
            emu_cp_async(emu_cvta_shared(sm), &src[3], 4);
            emu_cp_async_commit(); // group A
            emu_cp_async(emu_cvta_shared(sm + 1), &src[4], 4);
            memcpy(&seen[0], sm, 4);     // A issued, not waited for
            emu_cp_async_commit();       // group B
            emu_cp_async_commit();       // group C, empty: it counts
            emu_cp_async_wait(2);        // A lands; B and C may stay pending
            memcpy(&seen[1], sm, 4);
            memcpy(&seen[2], sm + 1, 4);
            emu_cp_async_wait(0);
            memcpy(&seen[3], sm + 1, 4);
            emu_cp_async(emu_cvta_shared(sm + 2), &src[5], 4); // never waited for: lands at the thread's exit
        }
    });
    unsigned want3, want4;
    memcpy(&want3, &src[3], 4);
    memcpy(&want4, &src[4], 4);
    CHECK(seen[0] == 0xCDCDCDCDu, "a cp.async read before its wait: %#x, want the 0xCD pattern", seen[0]);
    CHECK(seen[1] == want3, "wait_group 2 did not land the oldest group: %#x", seen[1]);
    CHECK(seen[2] == 0xCDCDCDCDu, "wait_group 2 landed a group among the newest two: %#x", seen[2]);
    CHECK(seen[3] == want4, "wait_group 0 left a group pending: %#x", seen[3]);
}

// ---- failures abort with a message: run in a child process ----
static void expect_abort(const char* name, const char* want, const std::function<void()>& fn) {
    char path[] = "/tmp/cudaemu-selftest.XXXXXX";
    int fd = mkstemp(path);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    std::string msg;
    char buf[4096];
    lseek(fd, 0, SEEK_SET);
    ssize_t k;
    while ((k = read(fd, buf, sizeof buf)) > 0) msg.append(buf, (size_t)k);
    close(fd);
    unlink(path);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: child did not abort (status %#x)", name, st);
    CHECK(msg.find(want) != std::string::npos, "%s: message lacks \"%s\":\n%s", name, want, msg.c_str());
    if (getenv("SELFTEST_VERBOSE")) fprintf(stderr, "--- %s:\n%s", name, msg.c_str());
}

static void test_failures() {
    expect_abort("deadlock", "cudaemu: deadlock", [] {
        launch({1, 1, 1}, {64, 1, 1}, 0, [] {
            // lanes 0-15 wait in __syncwarp for lanes 16-31, which wait in
            // __syncthreads for lanes 0-15
            if ((threadIdx.x & 31) < 16)
                __syncwarp();
            else
                __syncthreads();
        });
    });
    expect_abort("named barrier never completed", "named barrier 3 (32 of 64 arrived)", [] {
        launch({1, 1, 1}, {64, 1, 1}, 0, [] {
            if (threadIdx.x < 32) emu_bar_sync(3, 64);
        });
    });
    expect_abort("trap", "kernel trapper grid (2,1,1) block (32,1,1): block (1,0,0) thread (5,0,0)", [] {
        emu_set_launch_name("trapper");
        launch({2, 1, 1}, {32, 1, 1}, 0, [] {
            if (blockIdx.x == 1 && threadIdx.x == 5) __trap();
        });
    });
    expect_abort("smem_addr outside", "cvta.to.shared", [] {
        launch({1, 1, 1}, {1, 1, 1}, 16, [] {
            static int x;
            (void)emu_cvta_shared(&x);
        });
    });
}

// ---- cost ----
static void bench() {
    double ns = emu_bench_switch(2000000);
    printf("fiber switch: %.1f ns\n", ns);
    double t0 = now_s();
    int rounds = 200;
    launch({1, 1, 1}, {1024, 1, 1}, 0, [&] {
        for (int i = 0; i < rounds; i++) __syncthreads();
    });
    double dt = now_s() - t0;
    printf("__syncthreads, 1024 threads: %.1f ns a thread-arrival\n", dt * 1e9 / (1024.0 * rounds));
    t0 = now_s();
    launch({1, 1, 1}, {256, 1, 1}, 0, [&] {
        float v = (float)threadIdx.x;
        for (int i = 0; i < rounds; i++) v += __shfl_xor_sync(0xffffffffu, v, 1);
        if (v == 12345.f) printf(".");
    });
    dt = now_s() - t0;
    printf("__shfl_xor_sync, 256 threads: %.1f ns a lane-shuffle\n", dt * 1e9 / (256.0 * rounds));
}

// ---- the real kernels: the tensor-core products against the dp4a GEMV ----
// kernels.cu's qgemm_mma and qgemm_mma2 compute qgemv's result bit for bit
// on a GPU (mma's integer products, then qrow's float epilogue). Here they
// run on the emulated mma, ldmatrix and cp.async, while qgemv uses only
// dp4a and shuffles: agreement checks those emulations against fragment
// layouts the kernels were written (and measured on a GPU) for, not against
// this file's own tables.
typedef long long i64;
typedef void (*quantize_fn)(const float*, int, signed char*, int*, float*, float*);
typedef void (*qgemv_fn)(float*, const uint8_t*, const uint8_t*, const uint8_t*, int, int, int, const signed char*, const int*,
                         const float*, const float*, const float*, const int*, int, i64, i64, int, int);
typedef void (*qgemm_fn)(float*, const uint8_t*, const uint8_t*, const uint8_t*, int, int, int, const signed char*, const int*,
                         const float*, const float*, const float*, int);

static unsigned blocks(int n, int b) { return (unsigned)((n + b - 1) / b); }

// kernel finds a kernel of the .so through the thunk selftest.sh appends
// (__selftest_NAME returns its address: the kernels themselves are hidden).
static void* kernel(void* h, const char* name) {
    std::string t = std::string("__selftest_") + name;
    void* (*thunk)() = (void* (*)())dlsym(h, t.c_str());
    return thunk ? thunk() : nullptr;
}

static void test_real_gemm(void* h) {
    auto quantize = (quantize_fn)kernel(h, "quantize");
    auto qgemv = (qgemv_fn)kernel(h, "qgemv");
    auto mma = (qgemm_fn)kernel(h, "qgemm_mma");
    auto mma2 = (qgemm_fn)kernel(h, "qgemm_mma2");
    auto mma2s = (qgemm_fn)kernel(h, "qgemm_mma2_s");
    CHECK(quantize && qgemv && mma && mma2 && mma2s, "kernels missing from the .so");
    if (!(quantize && qgemv && mma && mma2 && mma2s)) return;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    auto bf16 = [](float f) {
        unsigned u;
        memcpy(&u, &f, 4);
        return (uint16_t)(u >> 16);
    };
    const int rows = 96, cols = 256, G = cols / 64, T = 70;
    std::vector<float> x((size_t)T * cols);
    for (auto& v : x) v = U(rng) * 3.0f;
    std::vector<signed char> xq8((size_t)T * cols);
    std::vector<int> xq4((size_t)T * G * 16);
    std::vector<float> dx((size_t)T * G), sx((size_t)T * G);
    const float* px = x.data();
    signed char* p8 = xq8.data();
    int* p4 = xq4.data();
    float *pd = dx.data(), *ps = sx.data();
    int tg = T * G;
    launch({blocks(tg, 8), 1, 1}, {256, 1, 1}, 0, [&] { quantize(px, tg, p8, p4, pd, ps); });
    for (int bits : {4, 8}) {
        std::vector<uint8_t> data((size_t)rows * cols * bits / 8);
        for (auto& b : data) b = (uint8_t)rng();
        std::vector<uint16_t> sc((size_t)rows * G), bi((size_t)rows * G);
        for (auto& v : sc) v = bf16(U(rng) * 0.02f);
        for (auto& v : bi) v = bf16(U(rng) * 0.1f);
        const uint8_t *d = data.data(), *s = (const uint8_t*)sc.data(), *b = (const uint8_t*)bi.data();
        std::vector<float> ref((size_t)T * rows, -1), got((size_t)T * rows, -2);
        float* pr = ref.data();
        launch({(unsigned)T, blocks(rows, 256 / 16), 1}, {256, 1, 1}, 0,
               [&] { qgemv(pr, d, s, b, rows, cols, bits, p8, p4, pd, ps, nullptr, nullptr, 1, 0, 0, 0, 16); });
        struct Variant {
            const char* name;
            qgemm_fn fn;
            emu_dim3 grid, block;
            unsigned smem;
        } vs[] = {
            {"qgemm_mma", mma, {blocks(T, 32), blocks(rows, 16), 1}, {128, 1, 1}, 0},
            {"qgemm_mma2", mma2, {blocks(T, 64), blocks(rows, 64), 1}, {256, 1, 1}, (unsigned)(4 * (64 * bits * 8 + 64 * 72) + 4 * 64 * G)},
            {"qgemm_mma2_s", mma2s, {blocks(T, 32), blocks(rows, 64), 1}, {128, 1, 1}, (unsigned)(4 * (64 * bits * 8 + 32 * 72) + 4 * 64 * G)},
        };
        for (auto& v : vs) {
            std::fill(got.begin(), got.end(), -2.0f);
            float* pg = got.data();
            qgemm_fn fn = v.fn;
            launch(v.grid, v.block, v.smem, [&] { fn(pg, d, s, b, rows, cols, bits, p8, p4, pd, ps, nullptr, T); });
            int bad = 0;
            for (size_t i = 0; i < got.size(); i++)
                if (memcmp(&got[i], &ref[i], 4) != 0 && bad++ < 3)
                    CHECK(false, "%s Q%d token %zu row %zu: %.9g, qgemv %.9g", v.name, bits, i / rows, i % rows, got[i], ref[i]);
            CHECK(bad == 0, "%s Q%d: %d of %zu outputs differ from qgemv", v.name, bits, bad, got.size());
        }
    }
}

// ---- the real kernels: the delta rule's four forms agree bitwise ----
// gdn_rec_pipe, gdn_rec_par and gdn_rec_reg are bitwise gdn_rec on a GPU
// (gpukernels.go); gdn_rec_reg hands partial sums down its warps through
// named barriers (barrier.arrive / barrier.sync), gdn_rec_par splits the
// update over four warps with __syncthreads.
typedef void (*gdn_fn)(float*, float*, const float*, const float*, const float*, const float*, const float*, int, int, int, int, int,
                       int, int);

static void test_real_gdn(void* h) {
    const char* names[] = {"gdn_rec", "gdn_rec_pipe", "gdn_rec_par", "gdn_rec_reg"};
    gdn_fn fns[4];
    for (int i = 0; i < 4; i++) {
        fns[i] = (gdn_fn)kernel(h, names[i]);
        CHECK(fns[i], "%s missing from the .so", names[i]);
        if (!fns[i]) return;
    }
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    const int Hk = 2, Hv = 4, Dv = 64;
    for (int Dk : {64, 128})
        for (int T : {1, 5, 19}) {
            const int C = 2 * Hk * Dk + Hv * Dv, ab = Hv + 1;
            std::vector<float> conv((size_t)T * C), a((size_t)T * ab), b((size_t)T * ab), nea(Hv), dtb(Hv), S0((size_t)Hv * Dk * Dv);
            for (auto& v : conv) v = U(rng);
            for (auto& v : a) v = U(rng);
            for (auto& v : b) v = U(rng) * 2.0f;
            for (auto& v : nea) v = -0.1f - 0.8f * (U(rng) + 1.0f) / 2.0f;
            for (auto& v : dtb) v = U(rng) * 0.5f;
            for (auto& v : S0) v = U(rng) * 0.1f;
            int base = 32 * Dk + 3 * Dk + 4 * T + (T <= 8 ? T * 2 * Dk : 0);
            unsigned smem[4] = {(unsigned)base * 4, (unsigned)base * 4, (unsigned)(base + 64 * Dk + 32) * 4,
                                (unsigned)(4 * T + 4 * 96 + 2 * 4 * 32 + 32 + (T <= 8 ? T * 2 * Dk : 0)) * 4};
            std::vector<float> oref, sref;
            for (int i = 0; i < 4; i++) {
                std::vector<float> o((size_t)T * Hv * Dv, -7.0f), S = S0;
                float *po = o.data(), *pS = S.data();
                const float *pc = conv.data(), *pa = a.data(), *pb = b.data(), *pn = nea.data(), *pd = dtb.data();
                gdn_fn fn = fns[i];
                launch({(unsigned)Hv, blocks(Dv, 32), 1}, {128, 1, 1}, smem[i],
                       [&] { fn(po, pS, pc, pa, pb, pn, pd, C, Hk, Hv, Dk, Dv, T, ab); });
                if (i == 0) {
                    oref = o;
                    sref = S;
                    continue;
                }
                CHECK(memcmp(o.data(), oref.data(), o.size() * 4) == 0, "%s Dk %d T %d: outputs differ from gdn_rec", names[i], Dk, T);
                CHECK(memcmp(S.data(), sref.data(), S.size() * 4) == 0, "%s Dk %d T %d: state differs from gdn_rec", names[i], Dk, T);
            }
            bool moved = false;
            for (size_t j = 0; j < S0.size(); j++) moved |= sref[j] != S0[j];
            CHECK(moved && oref[0] != -7.0f, "gdn_rec Dk %d T %d wrote nothing", Dk, T);
        }
}

// ---- a kernel named like a C library function runs itself ----
// kernels.cu's `advance` shares its name with glibc's regexp advance();
// exported, the launcher's call bound to glibc's and crashed.
static void test_real_advance(void* h) {
    auto adv = (void (*)(int*, int))kernel(h, "advance");
    CHECK(adv, "advance missing from the .so");
    if (!adv) return;
    int pos = 40;
    launch({1, 1, 1}, {32, 1, 1}, 0, [&] { adv(&pos, 2); });
    CHECK(pos == 42, "advance: pos %d, want 42", pos);
    CHECK(dlsym(h, "advance") == nullptr, "kernels are exported: a kernel named like a library function may call that instead");
}

int main(int argc, char** argv) {
    std::vector<void*> sos;
    for (int i = 1; i < argc; i++) {
        void* h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
        CHECK(h != nullptr, "dlopen %s: %s", argv[i], dlerror());
        if (h) printf("ok   %s resolves against the runtime\n", argv[i]);
        if (h) sos.push_back(h);
    }
    // every check in thread order, then in two random orders (a missing
    // barrier that thread order hides shows in one of those)
    const char* orders[] = {"thread order", "random order (seed 1)", "random order (seed 2)"};
    for (int o = 0; o < 3; o++) {
        emu_set_sched(o == 0 ? 0 : 1, (unsigned long long)o);
        printf("-- %s\n", orders[o]);
        for (void* h : sos) {
            int before = failures;
            double t0 = now_s();
            test_real_gemm(h);
            printf("%s kernels.cu qgemm_mma, qgemm_mma2, qgemm_mma2_s = qgemv bitwise, Q4 and Q8 (%.2f s)\n",
                   failures == before ? "ok  " : "FAIL", now_s() - t0);
            before = failures;
            test_real_advance(h);
            printf("%s kernels.cu advance (named like glibc's regexp advance) runs itself\n", failures == before ? "ok  " : "FAIL");
            before = failures;
            t0 = now_s();
            test_real_gdn(h);
            printf("%s kernels.cu gdn_rec_pipe, gdn_rec_par, gdn_rec_reg = gdn_rec bitwise (%.2f s)\n", failures == before ? "ok  " : "FAIL",
                   now_s() - t0);
        }
        struct {
            const char* name;
            void (*fn)();
        } tests[] = {{"syncthreads", test_syncthreads}, {"shuffles", test_shuffles}, {"votes", test_votes},
                     {"named barriers", test_named_barriers}, {"mma", test_mma}, {"ldmatrix", test_ldmatrix},
                     {"cp.async", test_cp_async}, {"failures", test_failures}};
        for (auto& t : tests) {
            int before = failures;
            double t0 = now_s();
            t.fn();
            printf("%s %s (%.2f s)\n", failures == before ? "ok  " : "FAIL", t.name, now_s() - t0);
        }
    }
    emu_set_sched(0, 0);
    bench();
    if (failures) {
        printf("FAIL: %d checks\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
