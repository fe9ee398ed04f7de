// cudaemu.h: the device side of the CPU emulation of the project's CUDA
// kernels (tools/cudaemu). The emulated NVRTC compiles a kernel source with
// g++ and `-include cudaemu.h -DNVMAI_EMU`; this header makes the CUDA C++
// the kernels use (threadIdx, __shared__, warp shuffles, atomics, the
// intrinsics, and the emulations of their inline PTX) mean the same thing on
// the host. runtime.cc runs the threads of a block as cooperative fibers and
// implements every collective (barriers, shuffles, votes, ldmatrix, mma) as a
// real rendezvous of the lanes involved.
//
// It exists so the GPU code can be exercised on a machine with no GPU. It is
// not a replacement for validating on a device: timing, memory ordering
// between blocks, the hardware's math library and undefined behaviour
// (reading an inactive lane, races) are not what a GPU does.
#ifndef NVMAI_CUDAEMU_H
#define NVMAI_CUDAEMU_H

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmath>
#include <limits>
#include <type_traits>

// ---- the interface runtime.cc exports (C symbols of the fake libcuda) ----

struct emu_dim3 {
    unsigned x, y, z;
};

// EmuThread is the part of a fiber's state the kernel code reads.
struct EmuThread {
    emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
    unsigned tid;  // linear thread index in the block
    unsigned lane; // tid % 32
    unsigned warp; // tid / 32
};

extern "C" {
extern EmuThread* __emu_cur;  // the fiber running now
extern void* __emu_dyn_smem;  // the current block's dynamic shared memory

void emu_launch(emu_dim3 grid, emu_dim3 block, unsigned dyn_smem_bytes, void (*body)(void*), void* ctx);
// 0: runnable fibers run in thread order (default); 1: in a random order
// from seed (also NVMAI_CUDAEMU_FIBERS=random:SEED), to expose missing barriers.
void emu_set_sched(int mode, unsigned long long seed);
// Names the next emu_launch's kernel in its failure messages (optional).
void emu_set_launch_name(const char* name);

void emu_syncthreads(void);
void emu_bar_sync(int id, int n);   // PTX barrier.sync id, n
void emu_bar_arrive(int id, int n); // PTX barrier.arrive id, n
void emu_syncwarp(unsigned mask);
// mode: 0 idx, 1 up, 2 down, 3 bfly (PTX shfl.sync), width as CUDA's.
unsigned long long emu_shfl(unsigned mask, unsigned long long v, int mode, int b, int width);
unsigned emu_ballot(unsigned mask, int pred);
unsigned emu_match_any(unsigned mask, unsigned long long v);
unsigned emu_match_all(unsigned mask, unsigned long long v, int* pred);
void emu_ldmatrix_x4(unsigned r[4], unsigned addr);
void emu_mma_m16n8k32_u8s8(int d[4], const unsigned a[4], const int b[2]);
unsigned emu_smem_addr(const void* p);
void emu_cp_async(unsigned dst, const void* src, unsigned bytes);
void emu_cp_async_commit(void);   // PTX cp.async.commit_group
void emu_cp_async_wait(int n);    // PTX cp.async.wait_group n
__attribute__((noreturn)) void emu_trap(const char* what);
}

#ifndef CUDAEMU_RUNTIME_ONLY

// ---- CUDA C++ keywords ----

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Blocks run one after another on one OS thread, so a function-static array
// is one block's shared memory.
#define __shared__ static
#define __constant__ static
#define __managed__

#define warpSize 32

// ---- built-in variables and vector types ----

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
    dim3(emu_dim3 d) : x(d.x), y(d.y), z(d.z) {}
};

#define threadIdx (__emu_cur->threadIdx)
#define blockIdx (__emu_cur->blockIdx)
#define blockDim (__emu_cur->blockDim)
#define gridDim (__emu_cur->gridDim)

#define EMU_VEC2(T, N, A) \
    struct __attribute__((aligned(A))) N { T x, y; }; \
    static inline N make_##N(T x, T y) { N r; r.x = x; r.y = y; return r; }
#define EMU_VEC3(T, N) \
    struct N { T x, y, z; }; \
    static inline N make_##N(T x, T y, T z) { N r; r.x = x; r.y = y; r.z = z; return r; }
#define EMU_VEC4(T, N, A) \
    struct __attribute__((aligned(A))) N { T x, y, z, w; }; \
    static inline N make_##N(T x, T y, T z, T w) { N r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }

EMU_VEC2(signed char, char2, 2)
EMU_VEC2(unsigned char, uchar2, 2)
EMU_VEC2(short, short2, 4)
EMU_VEC2(unsigned short, ushort2, 4)
EMU_VEC2(int, int2, 8)
EMU_VEC2(unsigned, uint2, 8)
EMU_VEC2(float, float2, 8)
EMU_VEC2(long long, longlong2, 16)
EMU_VEC2(unsigned long long, ulonglong2, 16)
EMU_VEC2(double, double2, 16)
EMU_VEC3(int, int3)
EMU_VEC3(float, float3)
EMU_VEC4(signed char, char4, 4)
EMU_VEC4(unsigned char, uchar4, 4)
EMU_VEC4(short, short4, 8)
EMU_VEC4(unsigned short, ushort4, 8)
EMU_VEC4(int, int4, 16)
EMU_VEC4(unsigned, uint4, 16)
EMU_VEC4(float, float4, 16)
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) {
    uint3 r;
    r.x = x;
    r.y = y;
    r.z = z;
    return r;
}

// ---- barriers, warp collectives ----

static inline void __syncthreads() { emu_syncthreads(); }
static inline int __syncthreads_count(int p) {
    // Not used by the kernels; built from a shared counter and two barriers.
    static int n;
    emu_syncthreads();
    if (__emu_cur->tid == 0) n = 0;
    emu_syncthreads();
    if (p) n++;
    emu_syncthreads();
    int r = n;
    emu_syncthreads();
    return r;
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_syncwarp(mask); }

template <class T>
static inline unsigned long long emu_bits_of(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
    unsigned long long u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T>
static inline T emu_of_bits(unsigned long long u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}

template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = warpSize) {
    return emu_of_bits<T>(emu_shfl(mask, emu_bits_of(v), 0, src, width));
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    return emu_of_bits<T>(emu_shfl(mask, emu_bits_of(v), 1, (int)delta, width));
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    return emu_of_bits<T>(emu_shfl(mask, emu_bits_of(v), 2, (int)delta, width));
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
    return emu_of_bits<T>(emu_shfl(mask, emu_bits_of(v), 3, lane_mask, width));
}
static inline unsigned __ballot_sync(unsigned mask, int pred) { return emu_ballot(mask, pred); }
static inline int __any_sync(unsigned mask, int pred) { return emu_ballot(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) {
    // every participating lane: ballot of the negation is empty
    return emu_ballot(mask, !pred) == 0;
}
// No __activemask: which lanes run together is the hardware's choice; a
// kernel that needs it gets a compile error here rather than a guess.
template <class T>
static inline unsigned __match_any_sync(unsigned mask, T v) {
    return emu_match_any(mask, emu_bits_of(v));
}
template <class T>
static inline unsigned __match_all_sync(unsigned mask, T v, int* pred) {
    return emu_match_all(mask, emu_bits_of(v), pred);
}

#define __threadfence() ((void)0)
#define __threadfence_block() ((void)0)
#define __threadfence_system() ((void)0)

#define EMU_STR2(x) #x
#define EMU_STR(x) EMU_STR2(x)
#define __trap() emu_trap("__trap() at " __FILE__ ":" EMU_STR(__LINE__))
#define __brkpt() emu_trap("__brkpt() at " __FILE__ ":" EMU_STR(__LINE__))

// ---- inline PTX the kernels use (their #if defined(NVMAI_EMU) branches) ----

static inline void emu_mma_u8s8(int d[4], const unsigned a[4], const int b[2]) { emu_mma_m16n8k32_u8s8(d, a, b); }
static inline void emu_ldsm_x4(unsigned r[4], unsigned addr) { emu_ldmatrix_x4(r, addr); }
static inline unsigned emu_cvta_shared(const void* p) { return emu_smem_addr(p); }
// dp4a.s32.s32 / dp4a.u32.s32: four byte products added to c.
static inline int emu_dp4a_ss(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
static inline int emu_dp4a_us(unsigned a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(unsigned char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
static inline int __dp4a(int a, int b, int c) { return emu_dp4a_ss(a, b, c); }
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; i++) c += (unsigned)(unsigned char)(a >> (8 * i)) * (unsigned)(unsigned char)(b >> (8 * i));
    return c;
}

// ---- integer intrinsics ----

static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
static inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (s & 31)) >> 32);
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (s & 31));
}

// CUDA's min and max, with its overloads for mixed signedness.
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
static inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
static inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
static inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(float a, double b) { return fmin(a, b); }
static inline double max(float a, double b) { return fmax(a, b); }
static inline double min(double a, float b) { return fmin(a, b); }
static inline double max(double a, float b) { return fmax(a, b); }

// ---- float intrinsics: each rounds on its own (the .so is built with
// -ffp-contract=off, as NVRTC --fmad=false), default rounding to nearest ----

static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __drcp_rn(double a) { return 1.0 / a; }
static inline double __dsqrt_rn(double a) { return sqrt(a); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __fdividef(float a, float b) { return a / b; }
// __expf, __logf, __sinf, __cosf, __powf: glibc declares functions of those
// names (its own, of the same meaning), so they are not redefined here.
static inline float __saturatef(float a) { return a != a ? 0.0f : a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a; }
static inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
static inline double rsqrt(double a) { return 1.0 / sqrt(a); }

static inline int __float_as_int(float f) { return emu_of_bits<int>(emu_bits_of(f)); }
static inline unsigned __float_as_uint(float f) { return emu_of_bits<unsigned>(emu_bits_of(f)); }
static inline float __int_as_float(int i) { return emu_of_bits<float>(emu_bits_of(i)); }
static inline float __uint_as_float(unsigned i) { return emu_of_bits<float>(emu_bits_of(i)); }
static inline long long __double_as_longlong(double d) { return emu_of_bits<long long>(emu_bits_of(d)); }
static inline double __longlong_as_double(long long i) { return emu_of_bits<double>(emu_bits_of(i)); }
static inline int __double2hiint(double d) { return (int)(__double_as_longlong(d) >> 32); }
static inline int __double2loint(double d) { return (int)__double_as_longlong(d); }
static inline double __hiloint2double(int hi, int lo) {
    return __longlong_as_double((long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo));
}

// Float to integer as PTX cvt.rzi/rni: saturating, NaN to 0.
template <class I, class F>
static inline I emu_f2i_sat(F f) {
    if (f != f) return 0;
    if (f <= (F)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (f >= (F)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)f;
}
static inline int __float2int_rz(float f) { return emu_f2i_sat<int>(f); }
static inline int __float2int_rn(float f) { return emu_f2i_sat<int>(rintf(f)); }
static inline int __float2int_rd(float f) { return emu_f2i_sat<int>(floorf(f)); }
static inline int __float2int_ru(float f) { return emu_f2i_sat<int>(ceilf(f)); }
static inline unsigned __float2uint_rz(float f) { return emu_f2i_sat<unsigned>(f); }
static inline unsigned __float2uint_rn(float f) { return emu_f2i_sat<unsigned>(rintf(f)); }
static inline long long __float2ll_rz(float f) { return emu_f2i_sat<long long>(f); }
static inline long long __float2ll_rn(float f) { return emu_f2i_sat<long long>(rintf(f)); }
static inline int __double2int_rz(double d) { return emu_f2i_sat<int>(d); }
static inline int __double2int_rn(double d) { return emu_f2i_sat<int>(rint(d)); }
static inline unsigned __double2uint_rz(double d) { return emu_f2i_sat<unsigned>(d); }
static inline long long __double2ll_rz(double d) { return emu_f2i_sat<long long>(d); }
static inline long long __double2ll_rn(double d) { return emu_f2i_sat<long long>(rint(d)); }
static inline unsigned long long __double2ull_rz(double d) { return emu_f2i_sat<unsigned long long>(d); }
static inline float __double2float_rn(double d) { return (float)d; }
static inline double __ll2double_rn(long long i) { return (double)i; }
static inline double __ull2double_rn(unsigned long long i) { return (double)i; }
static inline float __ll2float_rn(long long i) { return (float)i; }
static inline float __int2float_rn(int i) { return (float)i; }
static inline float __uint2float_rn(unsigned i) { return (float)i; }
static inline double __int2double_rn(int i) { return (double)i; }

// ---- atomics: one OS thread runs every fiber and a fiber switches only at a
// collective, so a plain read-modify-write is atomic ----

// EMU_ATOMIC defines atomicNAME(p, v): *p becomes NEXT (of the old value o
// and v, both as T); the old value is returned.
#define EMU_ATOMIC(NAME, NEXT)                \
    template <class T, class U>               \
    static inline T atomic##NAME(T* p, U v) { \
        T o = *p;                             \
        *p = (T)(NEXT);                       \
        return o;                             \
    }
EMU_ATOMIC(Add, o + (T)v)
EMU_ATOMIC(Sub, o - (T)v)
EMU_ATOMIC(Exch, (T)v)
EMU_ATOMIC(Max, (T)v > o ? (T)v : o)
EMU_ATOMIC(Min, (T)v < o ? (T)v : o)
EMU_ATOMIC(Or, o | (T)v)
EMU_ATOMIC(And, o & (T)v)
EMU_ATOMIC(Xor, o ^ (T)v)
#undef EMU_ATOMIC
template <class T, class U, class V>
static inline T atomicCAS(T* p, U cmp, V v) {
    T o = *p;
    if (o == (T)cmp) *p = (T)v;
    return o;
}
static inline unsigned atomicInc(unsigned* p, unsigned v) {
    unsigned o = *p;
    *p = o >= v ? 0 : o + 1;
    return o;
}
static inline unsigned atomicDec(unsigned* p, unsigned v) {
    unsigned o = *p;
    *p = (o == 0 || o > v) ? v : o - 1;
    return o;
}

template <class T>
static inline T __ldg(const T* p) {
    return *p;
}
template <class T>
static inline T __ldcs(const T* p) {
    return *p;
}
template <class T>
static inline T __ldcg(const T* p) {
    return *p;
}
template <class T>
static inline void __stcs(T* p, T v) {
    *p = v;
}
template <class T>
static inline void __stcg(T* p, T v) {
    *p = v;
}

// Everything the kernel source defines after this point is hidden: a
// kernel's calls bind to its own functions. Exported, an extern "C" kernel
// named like a C library function lost to it (the generated launcher of
// kernels.cu's `advance` called glibc's regexp advance() and crashed), and
// every call between device functions went through the PLT. The launchers
// the driver generates, and what the runtime exports, say visibility
// default themselves.
#pragma GCC visibility push(hidden)

#endif // CUDAEMU_RUNTIME_ONLY
#endif // NVMAI_CUDAEMU_H
