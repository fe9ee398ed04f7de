// nvmai GPU kernels for the Qwen3.5 decoder. Compiled at run time by NVRTC
// with --fmad=false: every product and sum rounds on its own, as in the Go
// references (pkg/kernels, pkg/models/qwen35) each kernel names.
// No host headers: NVRTC compiles this file alone.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef long long i64;

#define FLT_MAX_ 3.402823466e+38f

// PDL_ENTRY opens every kernel. With programmatic dependent launch (the
// engine launches with it on sm_90 and newer), a kernel's blocks may start
// while the previous kernel still runs; griddepcontrol.wait holds them until
// that kernel has finished and its writes are visible, so nothing below it
// reads or writes device memory early. launch_dependents then lets the next
// kernel's blocks be scheduled behind this one's. Without PDL both are no-ops.
#if defined(NVMAI_EMU) // tools/cudaemu: blocks run one launch after another
#define PDL_ENTRY() \
    do {            \
    } while (0)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_ENTRY()                                                \
    do {                                                           \
        asm volatile("griddepcontrol.wait;" ::: "memory");         \
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); \
    } while (0)
#else
#define PDL_ENTRY() \
    do {            \
    } while (0)
#endif

// Encodings, as pkg/kernels.Encoding numbers them.
#define ENC_F32 0
#define ENC_BF16 1
#define ENC_F16 2
#define ENC_Q4 3
#define ENC_Q8 4

__device__ __forceinline__ float bf16f(u16 h) { return __uint_as_float(((u32)h) << 16); }

__device__ __forceinline__ float f16f(u16 h) {
    // IEEE half to float, exact (as pkg/kernels.f16ToF32).
    u32 sign = ((u32)h & 0x8000u) << 16;
    u32 exp = ((u32)h >> 10) & 0x1f;
    u32 man = (u32)h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return __uint_as_float(sign);
        float v = (float)man * (1.0f / 16777216.0f); // man · 2^-24
        return sign ? -v : v;
    }
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    return __uint_as_float(sign | ((exp + 112) << 23) | (man << 13));
}

// exp32k is pkg/kernels.exp32: Cephes expf, bit for bit.
__device__ __forceinline__ float exp32k(float x) {
    if (x != x) return x;
    x = fminf(fmaxf(x, -87.0f), 88.0f);
    float n = rintf(__fmul_rn(x, 1.44269504088896341f));
    float r = __fsub_rn(x, __fmul_rn(n, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(n, -2.12194440e-4f));
    float r2 = __fmul_rn(r, r);
    float p = 1.9875691500e-4f;
    p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fmul_rn(p, r2), r);
    p = __fadd_rn(p, 1.0f);
    return __fmul_rn(p, __uint_as_float((u32)((int)n + 127) << 23));
}

// kernels' float32 sigmoid: 1/(1+exp32(-v)).
__device__ __forceinline__ float sigk(float v) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp32k(-v))); }

// qwen35's scalar functions: float64 inside, rounded once.
__device__ __forceinline__ float sigmoid64(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
__device__ __forceinline__ float exp64(float x) { return (float)exp((double)x); }
__device__ __forceinline__ float softplus64(float x) { return x > 20.0f ? x : (float)log1p(exp((double)x)); }

// ---------------------------------------------------------------------------
// Embedding: out[t] = row tokens[t] of the table (qwen35 embed.Row).
extern "C" __global__ void embed(float* out, const u8* data, const u16* scales, const u16* biases,
                                 int enc, int cols, const int* tokens) {
    PDL_ENTRY();
    int t = blockIdx.y;
    i64 row = tokens[t];
    float* o = out + (i64)t * cols;
    for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < cols; i += blockDim.x * gridDim.x) {
        float v;
        if (enc == ENC_Q4 || enc == ENC_Q8) {
            int g = i / 64;
            i64 groups = cols / 64;
            float s = bf16f(scales[row * groups + g]);
            float b = bf16f(biases[row * groups + g]);
            u32 q;
            if (enc == ENC_Q4) q = (data[row * (cols / 2) + i / 2] >> ((i & 1) * 4)) & 15;
            else q = data[row * cols + i];
            v = __fadd_rn(__fmul_rn(s, (float)q), b);
        } else if (enc == ENC_BF16) {
            v = bf16f(((const u16*)data)[row * cols + i]);
        } else if (enc == ENC_F16) {
            v = f16f(((const u16*)data)[row * cols + i]);
        } else {
            v = ((const float*)data)[row * cols + i];
        }
        o[i] = v;
    }
}

// ---------------------------------------------------------------------------
// Block reductions.
__device__ double block_sum_d(double v, double* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    double r = 0;
    if (threadIdx.x == 0) {
        for (int i = 0; i < nw; i++) r += sh[i];
        sh[0] = r;
    }
    __syncthreads();
    r = sh[0];
    __syncthreads();
    return r;
}

// invRMS: 1/sqrt(mean(x²)+eps), the sum of squares in float64.
__device__ float inv_rms(const float* x, int n, float eps, double* sh) {
    double ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += (double)x[i] * (double)x[i];
    ss = block_sum_d(ss, sh);
    float mean = (float)(ss / (double)n);
    return (float)(1.0 / sqrt((double)__fadd_rn(mean, eps)));
}

// rmsnorm: out[r] = x[r]·inv·scale per row of n (qwen35 rmsNorm). One block per row.
extern "C" __global__ void rmsnorm(float* out, const float* x, const float* scale, int n, float eps) {
    PDL_ENTRY();
    __shared__ double sh[32];
    const float* xr = x + (i64)blockIdx.x * n;
    float* orow = out + (i64)blockIdx.x * n;
    float inv = inv_rms(xr, n, eps, sh);
    for (int i = threadIdx.x; i < n; i += blockDim.x) orow[i] = __fmul_rn(__fmul_rn(xr[i], inv), scale[i]);
}

// add: x += y (qwen35 addTo).
extern "C" __global__ void add(float* x, const float* y, int n) {
    PDL_ENTRY();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(x[i], y[i]);
}

// swiglu: g = float32(g·sigmoid(g))·u (kernels.SwiGLU).
extern "C" __global__ void swiglu(float* g, const float* u, int n) {
    PDL_ENTRY();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = g[i];
        g[i] = __fmul_rn(__fmul_rn(v, sigk(v)), u[i]);
    }
}

// ---------------------------------------------------------------------------
// Activation quantization (kernels.QActivation): one warp per group of 64.
// xq8: int8 codes in element order; xq4: per group 8 words of even-element
// codes then 8 of odd ones (word j holds elements 8j, 8j+2, 8j+4, 8j+6 or
// 8j+1, …), matching the nibbles of an MLX Q4 word; dx = max|x|/127;
// sx = Σx in sum8's order (lane k sums elements k, k+8, … in order, then
// ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7))).
// quant_warp quantizes one group gi whose elements lane and lane+32 are a0
// and a1, by one warp; vs and qs are the warp's 64-entry scratch.
__device__ void quant_warp(float a0, float a1, i64 gi, int lane, float* vs, signed char* qs,
                           signed char* xq8, int* xq4, float* dx, float* sx) {
    vs[lane] = a0;
    vs[lane + 32] = a1;
    float amax = 0;
    if (fabsf(a0) > amax) amax = fabsf(a0); // NaNs never win
    if (fabsf(a1) > amax) amax = fabsf(a1);
    for (int o = 16; o > 0; o >>= 1) {
        float b = __shfl_xor_sync(0xffffffffu, amax, o);
        if (b > amax) amax = b;
    }
    float d = __fdiv_rn(amax, 127.0f);
    float inv = __fdiv_rn(127.0f, amax);
    bool tiny = amax != 0 && inv > FLT_MAX_;
    for (int h = 0; h < 2; h++) {
        float val = h ? a1 : a0;
        float t = __fmul_rn(val, inv);
        if (tiny) t = __fdiv_rn(val, d);
        if (t > 127.0f) t = 127.0f;
        else if (t < -127.0f) t = -127.0f;
        else if (t != t) t = 0.0f;
        signed char q = (signed char)(int)__fsub_rn(__fadd_rn(t, 12582912.0f), 12582912.0f);
        qs[lane + 32 * h] = q;
        xq8[gi * 64 + lane + 32 * h] = q;
    }
    __syncwarp();
    if (lane < 16) {
        int j = lane & 7, odd = lane >> 3;
        u32 word = 0;
        for (int b = 0; b < 4; b++) word |= ((u32)(u8)qs[8 * j + 2 * b + odd]) << (8 * b);
        xq4[gi * 16 + lane] = (int)word;
    }
    float l = 0;
    if (lane < 8)
        for (int m = 0; m < 8; m++) l = __fadd_rn(l, vs[8 * m + lane]);
    l = __fadd_rn(l, __shfl_down_sync(0xffffffffu, l, 4, 8));
    l = __fadd_rn(l, __shfl_down_sync(0xffffffffu, l, 2, 8));
    l = __fadd_rn(l, __shfl_down_sync(0xffffffffu, l, 1, 8));
    if (lane == 0) {
        dx[gi] = d;
        sx[gi] = l;
    }
    __syncwarp();
}

extern "C" __global__ void quantize(const float* x, int total_groups, signed char* xq8, int* xq4, float* dx, float* sx) {
    PDL_ENTRY();
    __shared__ float vs[8][64];
    __shared__ signed char qs[8][64];
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int gi = blockIdx.x * 8 + w;
    if (gi >= total_groups) return; // the whole warp
    const float* v = x + (i64)gi * 64;
    quant_warp(v[lane], v[lane + 32], gi, lane, vs[w], qs[w], xq8, xq4, dx, sx);
}

// swiglu_q is swiglu (g = silu(g)·u) and then quantize of the result, in one
// pass: a warp per group.
extern "C" __global__ void swiglu_q(float* g, const float* u, int total_groups, signed char* xq8, int* xq4, float* dx, float* sx) {
    PDL_ENTRY();
    __shared__ float vs[8][64];
    __shared__ signed char qs[8][64];
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int gi = blockIdx.x * 8 + w;
    if (gi >= total_groups) return;
    float* v = g + (i64)gi * 64;
    const float* uu = u + (i64)gi * 64;
    float g0 = v[lane], g1 = v[lane + 32];
    float a0 = __fmul_rn(__fmul_rn(g0, sigk(g0)), uu[lane]);
    float a1 = __fmul_rn(__fmul_rn(g1, sigk(g1)), uu[lane + 32]);
    v[lane] = a0;
    v[lane + 32] = a1;
    quant_warp(a0, a1, gi, lane, vs[w], qs[w], xq8, xq4, dx, sx);
}

// rmsnorm_q is rmsnorm of each row and then quantize of the result: one
// block per row, its warps taking the row's groups in turn.
extern "C" __global__ void rmsnorm_q(float* out, const float* x, const float* scale, int n, float eps,
                                     signed char* xq8, int* xq4, float* dx, float* sx) {
    PDL_ENTRY();
    __shared__ double sh[32];
    __shared__ float vs[32][64]; // up to 1024 threads: a group a warp
    __shared__ signed char qs[32][64];
    const float* xr = x + (i64)blockIdx.x * n;
    float* orow = out + (i64)blockIdx.x * n;
    float inv = inv_rms(xr, n, eps, sh);
    for (int i = threadIdx.x; i < n; i += blockDim.x) orow[i] = __fmul_rn(__fmul_rn(xr[i], inv), scale[i]);
    __syncthreads();
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, groups = n / 64;
    for (int g = w; g < groups; g += blockDim.x >> 5) {
        const float* v = orow + g * 64;
        quant_warp(v[lane], v[lane + 32], (i64)blockIdx.x * groups + g, lane, vs[w], qs[w], xq8, xq4, dx, sx);
    }
}

// dp4a_ss is __dp4a(int, int, int) written as the instruction, so the file
// needs no intrinsics header on any NVRTC.
__device__ __forceinline__ int dp4a_ss(int a, int b, int c) {
#if defined(NVMAI_EMU)
    return emu_dp4a_ss(a, b, c);
#else
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#endif
}

__device__ __forceinline__ int dp4a_us(u32 a, int b, int c) {
#if defined(NVMAI_EMU)
    return emu_dp4a_us(a, b, c);
#else
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#endif
}

// Matrix addressing shared by the GEMVs. A launch covers `slots` matrices of
// `rows` rows each (one, or the k experts a token selected): output row
// r = slot·rows + lr. With sel, slot s of token t uses expert sel[t·k+s],
// whose weights sit estride bytes after expert 0's. The input is token t's
// (xslot = 0) or the slot's own (xslot = 1: row t·slots+s of the inputs).

// qrow is one row's Q4/Q8 product through int8 activations, bitwise
// kernels.MatVecFast: lane L of the row's `lanes` threads takes groups L,
// L+lanes, … in order, v = float32(float32(s·dx)·d) + float32(b·Σx) per
// group, then the lanes fold by halving; lane 0 returns the sum. lanes is
// 16, or 8 when a row has at most 8 groups: lanes 8…15 would only fold +0
// into the sum. Inactive threads still take part in the shuffles. a is the
// activation vector's index.
__device__ __forceinline__ float qrow(const u8* w, const u16* sc, const u16* bi, int groups, int bits,
                                      const signed char* xq8, const int* xq4, const float* dx, const float* sx,
                                      i64 a, int lane, int lanes, bool active) {
    const float* dxa = dx + a * groups;
    const float* sxa = sx + a * groups;
    float acc = 0;
    if (active) {
#pragma unroll 4
        for (int g = lane; g < groups; g += lanes) {
            int d = 0;
            if (bits == 4) {
                const uint4* wp = (const uint4*)(w + g * 32);
                const int4* xp = (const int4*)(xq4 + (a * groups + g) * 16);
                uint4 w0 = wp[0], w1 = wp[1];
                int4 e0 = xp[0], e1 = xp[1], o0 = xp[2], o1 = xp[3];
                const u32 m = 0x0F0F0F0Fu;
                d = dp4a_ss((int)(w0.x & m), e0.x, d); d = dp4a_ss((int)((w0.x >> 4) & m), o0.x, d);
                d = dp4a_ss((int)(w0.y & m), e0.y, d); d = dp4a_ss((int)((w0.y >> 4) & m), o0.y, d);
                d = dp4a_ss((int)(w0.z & m), e0.z, d); d = dp4a_ss((int)((w0.z >> 4) & m), o0.z, d);
                d = dp4a_ss((int)(w0.w & m), e0.w, d); d = dp4a_ss((int)((w0.w >> 4) & m), o0.w, d);
                d = dp4a_ss((int)(w1.x & m), e1.x, d); d = dp4a_ss((int)((w1.x >> 4) & m), o1.x, d);
                d = dp4a_ss((int)(w1.y & m), e1.y, d); d = dp4a_ss((int)((w1.y >> 4) & m), o1.y, d);
                d = dp4a_ss((int)(w1.z & m), e1.z, d); d = dp4a_ss((int)((w1.z >> 4) & m), o1.z, d);
                d = dp4a_ss((int)(w1.w & m), e1.w, d); d = dp4a_ss((int)((w1.w >> 4) & m), o1.w, d);
            } else {
                const uint4* wp = (const uint4*)(w + g * 64);
                const int4* xp = (const int4*)(xq8 + (a * groups + g) * 64);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    uint4 ww = wp[k];
                    int4 xx = xp[k];
                    d = dp4a_us(ww.x, xx.x, d); d = dp4a_us(ww.y, xx.y, d);
                    d = dp4a_us(ww.z, xx.z, d); d = dp4a_us(ww.w, xx.w, d);
                }
            }
            float s = bf16f(sc[g]), b = bf16f(bi[g]);
            float mul = __fmul_rn(s, dxa[g]);
            float tt = __fmul_rn(mul, (float)d);
            float u = __fmul_rn(b, sxa[g]);
            acc = __fadd_rn(acc, __fadd_rn(tt, u));
        }
    }
    if (lanes == 16) acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 8, 16));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 4, lanes));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 2, lanes));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 1, lanes));
    return acc;
}

// qgemv: y = W·x for MLX affine Q4/Q8 (qrow per row). res, when set, is
// added: y = res + Wx.
extern "C" __global__ void qgemv(float* y, const u8* data, const u8* scales, const u8* biases, int rows, int cols, int bits,
                                 const signed char* xq8, const int* xq4, const float* dx, const float* sx,
                                 const float* res, const int* sel, int slots, i64 edata, i64 escale, int xslot, int lanes) {
    PDL_ENTRY();
    int t = blockIdx.x;
    int half = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    i64 r = (i64)blockIdx.y * (blockDim.x / lanes) + half;
    bool active = r < (i64)rows * slots;
    if (!active) r = 0;
    int slot = (int)(r / rows), lr = (int)(r % rows);
    int e = sel ? sel[t * slots + slot] : 0;
    int a = xslot ? t * slots + slot : t;
    int groups = cols / 64;
    const u8* w = data + (i64)e * edata + (i64)lr * (cols * bits / 8);
    const u16* sc = (const u16*)(scales + (i64)e * escale) + (i64)lr * groups;
    const u16* bi = (const u16*)(biases + (i64)e * escale) + (i64)lr * groups;
    float acc = qrow(w, sc, bi, groups, bits, xq8, xq4, dx, sx, a, lane, lanes, active);
    if (active && lane == 0) {
        i64 o = (i64)t * rows * slots + r;
        y[o] = res ? __fadd_rn(res[o], acc) : acc;
    }
}

// fgemv: y = W·x for float weights (F32, BF16, F16), bitwise kernels.MatVec:
// eight threads per row, thread l summing elements l, l+8, … in order (the
// tail of a row included), then ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). Same
// gathering and res as qgemv.
// qdot is one group's integer dot of Q4/Q8 weights with activation a.
__device__ __forceinline__ int qdot(int bits, uint4 w0, uint4 w1, uint4 w2, uint4 w3, const signed char* xq8, const int* xq4, i64 ag) {
    int d = 0;
    if (bits == 4) {
        const int4* xp = (const int4*)(xq4 + ag * 16);
        int4 e0 = xp[0], e1 = xp[1], o0 = xp[2], o1 = xp[3];
        const u32 m = 0x0F0F0F0Fu;
        d = dp4a_ss((int)(w0.x & m), e0.x, d); d = dp4a_ss((int)((w0.x >> 4) & m), o0.x, d);
        d = dp4a_ss((int)(w0.y & m), e0.y, d); d = dp4a_ss((int)((w0.y >> 4) & m), o0.y, d);
        d = dp4a_ss((int)(w0.z & m), e0.z, d); d = dp4a_ss((int)((w0.z >> 4) & m), o0.z, d);
        d = dp4a_ss((int)(w0.w & m), e0.w, d); d = dp4a_ss((int)((w0.w >> 4) & m), o0.w, d);
        d = dp4a_ss((int)(w1.x & m), e1.x, d); d = dp4a_ss((int)((w1.x >> 4) & m), o1.x, d);
        d = dp4a_ss((int)(w1.y & m), e1.y, d); d = dp4a_ss((int)((w1.y >> 4) & m), o1.y, d);
        d = dp4a_ss((int)(w1.z & m), e1.z, d); d = dp4a_ss((int)((w1.z >> 4) & m), o1.z, d);
        d = dp4a_ss((int)(w1.w & m), e1.w, d); d = dp4a_ss((int)((w1.w >> 4) & m), o1.w, d);
    } else {
        const int4* xp = (const int4*)(xq8 + ag * 64);
        uint4 ws[4] = {w0, w1, w2, w3};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int4 xx = xp[k];
            d = dp4a_us(ws[k].x, xx.x, d); d = dp4a_us(ws[k].y, xx.y, d);
            d = dp4a_us(ws[k].z, xx.z, d); d = dp4a_us(ws[k].w, xx.w, d);
        }
    }
    return d;
}

#define QTB 8 // most tokens one block multiplies by the same weights

// qgemv_tb is qgemv for up to QTB tokens per block (prefill without expert
// gathering): the weights are read once for all of them.
extern "C" __global__ void qgemv_tb(float* y, const u8* data, const u8* scales, const u8* biases, int rows, int cols, int bits,
                                 const signed char* xq8, const int* xq4, const float* dx, const float* sx,
                                 const float* res, const int* sel, int slots, i64 edata, i64 escale, int xslot, int T, int tb) {
    PDL_ENTRY();
    int t0 = blockIdx.x * tb;
    int nt = min(tb, T - t0);
    int half = threadIdx.x >> 4, lane = threadIdx.x & 15;
    i64 r = (i64)blockIdx.y * (blockDim.x >> 4) + half;
    bool active = r < (i64)rows * slots;
    if (!active) r = 0;
    int slot = (int)(r / rows), lr = (int)(r % rows);
    int e = sel ? sel[t0 * slots + slot] : 0; // sel implies tb = 1
    int groups = cols / 64;
    const u8* w = data + (i64)e * edata + (i64)lr * (cols * bits / 8);
    const u16* sc = (const u16*)(scales + (i64)e * escale) + (i64)lr * groups;
    const u16* bi = (const u16*)(biases + (i64)e * escale) + (i64)lr * groups;
    float acc[QTB];
#pragma unroll
    for (int k = 0; k < QTB; k++) acc[k] = 0;
    if (active) {
#pragma unroll 2
        for (int g = lane; g < groups; g += 16) {
            uint4 w0, w1, w2 = make_uint4(0, 0, 0, 0), w3 = make_uint4(0, 0, 0, 0);
            if (bits == 4) {
                const uint4* wp = (const uint4*)(w + g * 32);
                w0 = wp[0]; w1 = wp[1];
            } else {
                const uint4* wp = (const uint4*)(w + g * 64);
                w0 = wp[0]; w1 = wp[1]; w2 = wp[2]; w3 = wp[3];
            }
            float s = bf16f(sc[g]), b = bf16f(bi[g]);
#pragma unroll
            for (int k = 0; k < QTB; k++) {
                if (k < nt) {
                    i64 a = xslot ? (i64)(t0 + k) * slots + slot : t0 + k;
                    i64 ag = a * groups + g;
                    int d = qdot(bits, w0, w1, w2, w3, xq8, xq4, ag);
                    float mul = __fmul_rn(s, dx[ag]);
                    float tt = __fmul_rn(mul, (float)d);
                    float u = __fmul_rn(b, sx[ag]);
                    acc[k] = __fadd_rn(acc[k], __fadd_rn(tt, u));
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < QTB; k++) {
        float v = acc[k];
        v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, 8, 16));
        v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, 4, 16));
        v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, 2, 16));
        v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, 1, 16));
        if (active && lane == 0 && k < nt) {
            i64 o = (i64)(t0 + k) * rows * slots + r;
            y[o] = res ? __fadd_rn(res[o], v) : v;
        }
    }
}

// ---------------------------------------------------------------------------
// Prefill products on the integer tensor cores. A group's dot Σ q·xq is an
// exact int32 sum in any order, so mma.sync (u8 weights × s8 activations →
// s32) computes it bit for bit; the float epilogue then runs per (row,
// token, group) exactly as qrow, each thread keeping the 16 lane partials
// of qrow's order (group g into partial g mod 16) for its outputs and
// folding them by halving at the end. A warp computes 16 rows × 8 tokens.
// Fragments of m16n8k32 (PTX ISA): A a0/a2 row gid, a1/a3 row gid+8, k words
// tq and tq+4; B b0/b1 column gid, k words tq and tq+4; C c0/c1 row gid,
// c2/c3 row gid+8, columns 2tq and 2tq+1 (gid = lane/4, tq = lane%4). The
// k order inside a group is the dp4a pairing (Q4: low nibbles with the
// even codes, high with the odd).
__device__ __forceinline__ void mma_u8s8(int* d, const u32* a, const int* b) {
#if defined(NVMAI_EMU)
    emu_mma_u8s8(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap(); // the engine launches these kernels on sm_80 and newer only
#else
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// mma_tile computes a warp's tile: weight rows wa (row gid) and wb (row
// gid+8) with their scales and biases; activation vector vb for the B
// column gid, vc0 and vc1 for the C columns 2tq, 2tq+1. out: (gid, 2tq),
// (gid, 2tq+1), (gid+8, 2tq), (gid+8, 2tq+1).
__device__ __forceinline__ void mma_tile(float out[4], const u8* wa, const u8* wb, const u16* sca, const u16* bia, const u16* scb, const u16* bib,
                                         int groups, int bits, const signed char* xq8, const int* xq4, const float* dx, const float* sx,
                                         i64 vb, i64 vc0, i64 vc1, int tq) {
    float part[16][4];
#pragma unroll
    for (int m = 0; m < 16; m++)
#pragma unroll
        for (int e = 0; e < 4; e++) part[m][e] = 0;
    const u32 msk = 0x0F0F0F0Fu;
    for (int g0 = 0; g0 < groups; g0 += 16) {
#pragma unroll
        for (int m = 0; m < 16; m++) {
            int g = g0 + m;
            if (g < groups) {
                u32 A0[4], A1[4];
                int B0[2], B1[2];
                if (bits == 4) {
                    const u32* pa = (const u32*)(wa + g * 32);
                    const u32* pb = (const u32*)(wb + g * 32);
                    u32 a_t = pa[tq], a_t4 = pa[tq + 4], b_t = pb[tq], b_t4 = pb[tq + 4];
                    A0[0] = a_t & msk; A0[1] = b_t & msk; A0[2] = a_t4 & msk; A0[3] = b_t4 & msk;
                    A1[0] = (a_t >> 4) & msk; A1[1] = (b_t >> 4) & msk; A1[2] = (a_t4 >> 4) & msk; A1[3] = (b_t4 >> 4) & msk;
                    const int* xp = xq4 + (vb * groups + g) * 16;
                    B0[0] = xp[tq]; B0[1] = xp[tq + 4]; B1[0] = xp[8 + tq]; B1[1] = xp[12 + tq];
                } else {
                    const u32* pa = (const u32*)(wa + g * 64);
                    const u32* pb = (const u32*)(wb + g * 64);
                    A0[0] = pa[tq]; A0[1] = pb[tq]; A0[2] = pa[tq + 4]; A0[3] = pb[tq + 4];
                    A1[0] = pa[8 + tq]; A1[1] = pb[8 + tq]; A1[2] = pa[12 + tq]; A1[3] = pb[12 + tq];
                    const int* xp = (const int*)(xq8 + (vb * groups + g) * 64);
                    B0[0] = xp[tq]; B0[1] = xp[tq + 4]; B1[0] = xp[8 + tq]; B1[1] = xp[12 + tq];
                }
                int d[4] = {0, 0, 0, 0};
                mma_u8s8(d, A0, B0);
                mma_u8s8(d, A1, B1);
                float sa = bf16f(sca[g]), ba = bf16f(bia[g]), sb = bf16f(scb[g]), bb = bf16f(bib[g]);
                float dx0 = dx[vc0 * groups + g], sx0 = sx[vc0 * groups + g];
                float dx1 = dx[vc1 * groups + g], sx1 = sx[vc1 * groups + g];
                part[m][0] = __fadd_rn(part[m][0], __fadd_rn(__fmul_rn(__fmul_rn(sa, dx0), (float)d[0]), __fmul_rn(ba, sx0)));
                part[m][1] = __fadd_rn(part[m][1], __fadd_rn(__fmul_rn(__fmul_rn(sa, dx1), (float)d[1]), __fmul_rn(ba, sx1)));
                part[m][2] = __fadd_rn(part[m][2], __fadd_rn(__fmul_rn(__fmul_rn(sb, dx0), (float)d[2]), __fmul_rn(bb, sx0)));
                part[m][3] = __fadd_rn(part[m][3], __fadd_rn(__fmul_rn(__fmul_rn(sb, dx1), (float)d[3]), __fmul_rn(bb, sx1)));
            }
        }
    }
#pragma unroll
    for (int e = 0; e < 4; e++) { // qrow's fold: +8, +4, +2, +1
#pragma unroll
        for (int m = 0; m < 8; m++) part[m][e] = __fadd_rn(part[m][e], part[m + 8][e]);
#pragma unroll
        for (int m = 0; m < 4; m++) part[m][e] = __fadd_rn(part[m][e], part[m + 4][e]);
#pragma unroll
        for (int m = 0; m < 2; m++) part[m][e] = __fadd_rn(part[m][e], part[m + 2][e]);
        out[e] = __fadd_rn(part[0][e], part[1][e]);
    }
}

// qgemm_mma is qgemv_tb on the tensor cores: y [T, rows] (+ res), a block
// of 4 warps covering 16 rows × 32 tokens.
extern "C" __global__ void qgemm_mma(float* y, const u8* data, const u8* scales, const u8* biases, int rows, int cols, int bits,
                                     const signed char* xq8, const int* xq4, const float* dx, const float* sx, const float* res, int T) {
    PDL_ENTRY();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n0 = (blockIdx.x * 4 + warp) * 8;
    if (n0 >= T) return; // the whole warp: no block barrier below
    int gid = lane >> 2, tq = lane & 3, groups = cols / 64;
    int ra = blockIdx.y * 16 + gid, rb = ra + 8;
    int ca = min(ra, rows - 1), cb = min(rb, rows - 1); // rows past the end read row rows-1, unwritten
    i64 stride = (i64)cols * bits / 8;
    int tb = min(n0 + gid, T - 1), t0 = n0 + 2 * tq, t1 = t0 + 1;
    float out[4];
    mma_tile(out, data + ca * stride, data + cb * stride, (const u16*)scales + (i64)ca * groups, (const u16*)biases + (i64)ca * groups,
             (const u16*)scales + (i64)cb * groups, (const u16*)biases + (i64)cb * groups, groups, bits, xq8, xq4, dx, sx,
             tb, min(t0, T - 1), min(t1, T - 1), tq);
    int rr[4] = {ra, ra, rb, rb}, tt[4] = {t0, t1, t0, t1};
#pragma unroll
    for (int e = 0; e < 4; e++)
        if (rr[e] < rows && tt[e] < T) {
            i64 o = (i64)tt[e] * rows + rr[e];
            y[o] = res ? __fadd_rn(res[o], out[e]) : out[e];
        }
}

// qgemm_grouped_mma is qgemv_grouped on the tensor cores: block (e, row
// tile) runs expert e's entries 32 at a time (8 a warp).
extern "C" __global__ void qgemm_grouped_mma(float* y, const u8* data, const u8* scales, const u8* biases, int rows, int cols, int bits,
                                             const signed char* xq8, const int* xq4, const float* dx, const float* sx,
                                             const int* offs, const int* list, int topk, i64 edata, i64 escale, int xslot) {
    PDL_ENTRY();
    int e = blockIdx.x, begin = offs[e], end = offs[e + 1];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int gid = lane >> 2, tq = lane & 3, groups = cols / 64;
    int ra = blockIdx.y * 16 + gid, rb = ra + 8;
    int ca = min(ra, rows - 1), cb = min(rb, rows - 1);
    i64 stride = (i64)cols * bits / 8;
    const u8* w = data + (i64)e * edata;
    const u16* sc = (const u16*)(scales + (i64)e * escale);
    const u16* bi = (const u16*)(biases + (i64)e * escale);
    for (int i0 = begin + warp * 8; i0 < end; i0 += 32) { // warp-uniform
        int ib = min(i0 + gid, end - 1), i1 = i0 + 2 * tq, i2 = i1 + 1;
        int eb = list[ib], e1 = list[min(i1, end - 1)], e2 = list[min(i2, end - 1)];
        i64 vb = xslot ? eb : eb / topk, v1 = xslot ? e1 : e1 / topk, v2 = xslot ? e2 : e2 / topk;
        float out[4];
        mma_tile(out, w + ca * stride, w + cb * stride, sc + (i64)ca * groups, bi + (i64)ca * groups, sc + (i64)cb * groups, bi + (i64)cb * groups,
                 groups, bits, xq8, xq4, dx, sx, vb, v1, v2, tq);
        int rr[4] = {ra, ra, rb, rb}, ii[4] = {i1, i2, i1, i2}, ee[4] = {e1, e2, e1, e2};
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (rr[k] < rows && ii[k] < end) y[(i64)ee[k] * rows + rr[k]] = out[k];
    }
}

// ---------------------------------------------------------------------------
// Tiled prefill products on the integer tensor cores (qgemm_mma2,
// qgemm_grouped_mma2): bitwise qgemm_mma and so qrow / kernels.MatVecFast.
// A block of 8 warps computes BM rows × BN tokens, each warp 32 rows × 16
// tokens (2 × 2 m16n8k32 tiles, 16 outputs a thread). Per group the block
// stages its weight rows, the tokens' int8/int4-packed codes and their
// dx/sx in shared memory (cp.async, M2_STAGES deep, 16-byte chunks XOR-
// swizzled so ldmatrix reads them without bank conflicts); the rows'
// scales and biases are staged once per tile for all groups.
// Bitwise: qrow sums group g into partial g mod 16 in increasing g, then
// folds the 16 partials by halving (+8, +4, +2, +1), which is a balanced
// binary tree over the partials in bit-reversed order (0, 8, 4, 12, 2, …).
// So the blocks run the groups class by class in that order (classes c =
// brev4(0), brev4(1), …; within one, groups c, c+16, … ascending), keep one
// running partial a output, and fold each finished class into a stack of
// four pending sums exactly as the tree adds it: 5 floats an output
// instead of 16, with the same float operations in the same order.
#define M2_STAGES 4
#define M2_THREADS 256
#define M2_MAXG 1024 // most groups of 64 a row (the launcher checks)
#define M2_MAXE 1024 // most experts (the launcher checks)

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
#if defined(NVMAI_EMU)
    a = emu_cvta_shared(p);
#else
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
#endif
    return a;
}

__device__ __forceinline__ void cp_async16(u32 dst, const void* src) {
#if defined(NVMAI_EMU) // lands at the wait that covers its group (tools/cudaemu)
    emu_cp_async(dst, src, 16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
#else
    __trap();
#endif
}

__device__ __forceinline__ void cp_async4(u32 dst, const void* src) {
#if defined(NVMAI_EMU)
    emu_cp_async(dst, src, 4);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
#else
    __trap();
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(NVMAI_EMU)
    emu_cp_async_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

__device__ __forceinline__ void cp_async_wait_stages() { // all but the newest M2_STAGES-2 groups landed
#if defined(NVMAI_EMU)
    emu_cp_async_wait(M2_STAGES - 2);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(M2_STAGES - 2) : "memory");
#endif
}

__device__ __forceinline__ void ldsm_x4(u32 r[4], u32 addr) {
#if defined(NVMAI_EMU)
    emu_ldsm_x4(r, addr);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#else
    __trap();
#endif
}

__device__ __forceinline__ int brev4(int i) { return ((i & 1) << 3) | ((i & 2) << 1) | ((i & 4) >> 1) | ((i & 8) >> 3); }

// m2_float is (float)d for |d| < 2^22 (a group's dot is at most
// 64·255·127 < 2^21): exact, as the conversion is, without the slower I2F.
__device__ __forceinline__ float m2_float(int d) { return __fsub_rn(__int_as_float(0x4B400000 + d), 12582912.0f); }

// m2_push folds leaf i (0…15 in bit-reversed class order) of the partials'
// tree into the pending sums l0…l3, as qrow's halving fold adds them; leaf
// 15 leaves the output in l0. i is block-uniform.
__device__ __forceinline__ void m2_push(int i, float v, float& l0, float& l1, float& l2, float& l3) {
    if (i & 1) {
        v = __fadd_rn(l0, v);
        if (i & 2) {
            v = __fadd_rn(l1, v);
            if (i & 4) {
                v = __fadd_rn(l2, v);
                if (i & 8) {
                    l0 = __fadd_rn(l3, v);
                } else l3 = v;
            } else l2 = v;
        } else l1 = v;
    } else l0 = v;
}

// m2_shared is the dynamic shared memory of a WR×WN block (the launcher's
// mma2Shared computes the same).
__host__ __device__ __forceinline__ int m2_stage_bytes(int BM, int BN, int bits) { return BM * bits * 8 + BN * 72; }

// m2_tile runs one tile: rows r0… (nr of them) of the matrix at w (row
// stride G·bits·8 bytes; scales and biases sc, bi), tokens whose
// activation vectors and output rows the block put in vec and orow (nt of
// them). y[orow·rows + r] (+ res) gets each output.
template <int WR, int WN>
__device__ __forceinline__ void m2_tile(u8* sm, const u16* ord, const int* vec, const int* orow, int nt,
                                        float* y, const float* res, const u8* w, const u16* sc, const u16* bi, int r0, int nr, int rows, int G, int bits,
                                        const signed char* xq8, const int* xq4, const float* dx, const float* sx) {
    const int BM = 32 * WR, BN = 16 * WN, NTH = 32 * WR * WN;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wr = warp / WN, wn = warp % WN, gid = lane >> 2, tq = lane & 3;
    const int WB = bits * 8;                        // a row's bytes of one group
    const int SB = m2_stage_bytes(BM, BN, bits);    // one stage
    u16* sS = (u16*)(sm + M2_STAGES * SB);          // [BM·G] scales, then biases
    u16* sB = sS + BM * G;
    const i64 stride = (i64)G * WB;
    const u8* xbase = bits == 4 ? (const u8*)xq4 : (const u8*)xq8;

    // The rows' scales and biases for all groups: one contiguous range each.
    {
        int n = nr * G;
        const u16* s0 = sc + (i64)r0 * G;
        const u16* b0 = bi + (i64)r0 * G;
        bool al = ((((size_t)s0) | ((size_t)b0)) & 15) == 0;
        int n16 = al ? n / 8 : 0;
        for (int i = tid; i < n16; i += NTH) {
            cp_async16(smem_addr(sS + 8 * i), s0 + 8 * i);
            cp_async16(smem_addr(sB + 8 * i), b0 + 8 * i);
        }
        for (int i = 8 * n16 + tid; i < n; i += NTH) {
            sS[i] = s0[i];
            sB[i] = b0[i];
        }
    }
    // load stages group g into stage st.
    auto load = [&](int st, int g) {
        u8* sw = sm + st * SB;
        u8* sx_ = sw + BM * WB;
        float* sdx = (float*)(sx_ + BN * 64);
        float* ssx = sdx + BN;
        const int cpr = WB / 16; // chunks a row: 2 (Q4) or 4 (Q8)
        for (int i = tid; i < BM * cpr; i += NTH) {
            int row = i / cpr, c = i % cpr;
            int gr = r0 + min(row, nr - 1);
            int pc = cpr == 4 ? c ^ ((row >> 1) & 3) : c ^ ((row >> 2) & 1);
            cp_async16(smem_addr(sw + row * WB + pc * 16), w + gr * stride + g * WB + c * 16);
        }
        for (int i = tid; i < BN * 4; i += NTH) {
            int tok = i >> 2, c = i & 3;
            int pc = c ^ ((tok >> 1) & 3);
            cp_async16(smem_addr(sx_ + tok * 64 + pc * 16), xbase + ((i64)vec[tok] * G + g) * 64 + c * 16);
        }
        if (tid < BN) cp_async4(smem_addr(sdx + tid), dx + (i64)vec[tid] * G + g);
        else if (tid < 2 * BN) cp_async4(smem_addr(ssx + tid - BN), sx + (i64)vec[tid - BN] * G + g);
    };

    float acc[16], l0[16], l1[16], l2[16], l3[16];
#pragma unroll
    for (int o = 0; o < 16; o++) acc[o] = l0[o] = l1[o] = l2[o] = l3[o] = 0;
    // A warp whose rows or tokens all lie past the tile's end skips the
    // products (its outputs are not written) but still loads and waits.
    const bool busy = 32 * wr < nr && 16 * wn < nt;

#pragma unroll 1
    for (int s = 0; s < M2_STAGES - 1; s++) {
        if (s < G) load(s, ord[s]);
        cp_async_commit();
    }
#pragma unroll 1
    for (int j = 0; j < G; j++) {
        cp_async_wait_stages();
        __syncthreads();
        int jn = j + M2_STAGES - 1;
        if (jn < G) load(jn % M2_STAGES, ord[jn]);
        cp_async_commit();
        const int g = ord[j];
        if (busy) {
            const u8* sw = sm + (j % M2_STAGES) * SB;
            const u8* sx_ = sw + BM * WB;
            const float* sdx = (const float*)(sx_ + BN * 64);
            const float* ssx = sdx + BN;
            int d[2][2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int ni = 0; ni < 2; ni++)
#pragma unroll
                    for (int e = 0; e < 4; e++) d[mi][ni][e] = 0;
            u32 B[2][4];
#pragma unroll
            for (int ni = 0; ni < 2; ni++) {
                int tok = 16 * wn + 8 * ni + (lane & 7), c = lane >> 3;
                ldsm_x4(B[ni], smem_addr(sx_ + tok * 64 + ((c ^ ((tok >> 1) & 3)) * 16)));
            }
            if (bits == 4) {
                const u32 msk = 0x0F0F0F0Fu;
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    int row = 32 * wr + 16 * mi + (lane & 15), c = lane >> 4;
                    u32 a[4], A0[4], A1[4];
                    ldsm_x4(a, smem_addr(sw + row * 32 + ((c ^ ((row >> 2) & 1)) * 16)));
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        A0[k] = a[k] & msk;
                        A1[k] = (a[k] >> 4) & msk;
                    }
#pragma unroll
                    for (int ni = 0; ni < 2; ni++) {
                        mma_u8s8(d[mi][ni], A0, (const int*)&B[ni][0]);
                        mma_u8s8(d[mi][ni], A1, (const int*)&B[ni][2]);
                    }
                }
            } else {
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        int row = 32 * wr + 16 * mi + (lane & 15), c = 2 * h + (lane >> 4);
                        u32 a[4];
                        ldsm_x4(a, smem_addr(sw + row * 64 + ((c ^ ((row >> 1) & 3)) * 16)));
#pragma unroll
                        for (int ni = 0; ni < 2; ni++) mma_u8s8(d[mi][ni], a, (const int*)&B[ni][2 * h]);
                    }
                }
            }
            // The float epilogue, per output as qrow: acc += s·dx·d + b·sx.
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    int rl = 32 * wr + 16 * mi + 8 * hr + gid;
                    float s = bf16f(sS[rl * G + g]), b = bf16f(sB[rl * G + g]);
#pragma unroll
                    for (int ni = 0; ni < 2; ni++) {
#pragma unroll
                        for (int hc = 0; hc < 2; hc++) {
                            int tl = 16 * wn + 8 * ni + 2 * tq + hc;
                            int o = ((mi * 2 + hr) * 2 + ni) * 2 + hc;
                            float fd = m2_float(d[mi][ni][2 * hr + hc]);
                            float v = __fadd_rn(__fmul_rn(__fmul_rn(s, sdx[tl]), fd), __fmul_rn(b, ssx[tl]));
                            acc[o] = __fadd_rn(acc[o], v);
                        }
                    }
                }
            }
        }
        if (g + 16 >= G) { // g's class is done: fold it, and the empty classes after it, into the tree
            int i = brev4(g & 15);
#pragma unroll
            for (int o = 0; o < 16; o++) {
                m2_push(i, acc[o], l0[o], l1[o], l2[o], l3[o]);
                acc[o] = 0;
            }
            for (i++; i < 16 && brev4(i) >= G; i++) {
#pragma unroll
                for (int o = 0; o < 16; o++) m2_push(i, 0.0f, l0[o], l1[o], l2[o], l3[o]);
            }
        }
    }
    if (busy) {
#pragma unroll
        for (int o = 0; o < 16; o++) {
            int mi = o >> 3, hr = (o >> 2) & 1, ni = (o >> 1) & 1, hc = o & 1;
            int rl = 32 * wr + 16 * mi + 8 * hr + gid, tl = 16 * wn + 8 * ni + 2 * tq + hc;
            if (rl < nr && tl < nt) {
                i64 oi = (i64)orow[tl] * rows + r0 + rl;
                y[oi] = res ? __fadd_rn(res[oi], l0[o]) : l0[o];
            }
        }
    }
}

// m2_order writes the groups' class order (brev4(0)'s class first, each
// class ascending) to ord [G].
__device__ __forceinline__ void m2_order(u16* ord, int G) {
    if (threadIdx.x == 0) {
        int j = 0;
        for (int i = 0; i < 16; i++)
            for (int g = brev4(i); g < G; g += 16) ord[j++] = (u16)g;
    }
}

#define M2D_WR 2 // dense: 64 rows × 64 tokens a block (8 warps), or
#define M2D_WN 4 // 64 × 32 (4 warps) where that grid would not fill the GPU
#define M2G_WR 4 // grouped: 128 rows × 32 entries a block, two blocks an SM
#define M2G_WN 2 // (its grid is two blocks a multiprocessor)

template <int WR, int WN>
__device__ __forceinline__ void m2_dense(float* y, const u8* data, const u8* scales, const u8* biases, int rows, int cols, int bits,
                                         const signed char* xq8, const int* xq4, const float* dx, const float* sx, const float* res, int T) {
    extern __shared__ __align__(16) u8 m2sm[];
    const int BM = 32 * WR, BN = 16 * WN, G = cols / 64;
    __shared__ int vec[BN], orow[BN];
    __shared__ u16 ord[M2_MAXG];
    int t0 = blockIdx.x * BN, r0 = blockIdx.y * BM;
    int nt = min(BN, T - t0), nr = min(BM, rows - r0);
    m2_order(ord, G);
    if (threadIdx.x < BN) {
        int k = threadIdx.x;
        vec[k] = k < nt ? t0 + k : t0;
        orow[k] = vec[k];
    }
    __syncthreads();
    m2_tile<WR, WN>(m2sm, ord, vec, orow, nt, y, res, data, (const u16*)scales, (const u16*)biases, r0, nr, rows, G, bits, xq8, xq4, dx, sx);
}

// qgemm_mma2 is qgemm_mma tiled: block (token tile, row tile).
extern "C" __global__ void __launch_bounds__(M2_THREADS, 1)
qgemm_mma2(float* y, const u8* data, const u8* scales, const u8* biases, int rows, int cols, int bits,
           const signed char* xq8, const int* xq4, const float* dx, const float* sx, const float* res, int T) {
    PDL_ENTRY();
    m2_dense<M2D_WR, M2D_WN>(y, data, scales, biases, rows, cols, bits, xq8, xq4, dx, sx, res, T);
}

// qgemm_mma2_s is qgemm_mma2 in blocks of 64 rows × 32 tokens (4 warps),
// twice the blocks for products too small to fill the GPU otherwise.
extern "C" __global__ void __launch_bounds__(M2_THREADS / 2, 2)
qgemm_mma2_s(float* y, const u8* data, const u8* scales, const u8* biases, int rows, int cols, int bits,
             const signed char* xq8, const int* xq4, const float* dx, const float* sx, const float* res, int T) {
    PDL_ENTRY();
    m2_dense<M2D_WR, M2D_WN / 2>(y, data, scales, biases, rows, cols, bits, xq8, xq4, dx, sx, res, T);
}

// qgemm_grouped_mma2 is qgemm_grouped_mma tiled, over a tile list: expert
// e's entries (moe_group's offs, list) make ceil(n_e/BN) entry tiles, each
// crossed with the row tiles; the blocks take items blockIdx.x,
// blockIdx.x + gridDim.x, … of that list (entry tile major, row tile
// minor, so the row tiles of one entry tile run side by side), so no block
// idles on an empty expert.
extern "C" __global__ void __launch_bounds__(M2_THREADS, 2)
qgemm_grouped_mma2(float* y, const u8* data, const u8* scales, const u8* biases, int rows, int cols, int bits,
                   const signed char* xq8, const int* xq4, const float* dx, const float* sx,
                   const int* offs, const int* list, int topk, i64 edata, i64 escale, int xslot, int E) {
    PDL_ENTRY();
    extern __shared__ __align__(16) u8 m2sm[];
    const int BM = 32 * M2G_WR, BN = 16 * M2G_WN, G = cols / 64;
    __shared__ int vec[BN], orow[BN];
    __shared__ u16 ord[M2_MAXG];
    __shared__ int tstart[M2_MAXE + 1]; // entry tiles before expert e
    __shared__ int wsum[M2_THREADS / 32];
    m2_order(ord, G);
    // Exclusive scan of the experts' tile counts: thread t takes experts
    // 4t … 4t+3.
    {
        int tid = threadIdx.x, c[4], s = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int e = 4 * tid + k;
            c[k] = e < E ? (offs[e + 1] - offs[e] + BN - 1) / BN : 0;
            s += c[k];
        }
        int lane = tid & 31, wp = tid >> 5, inc = s;
        for (int o = 1; o < 32; o <<= 1) {
            int v = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += v;
        }
        if (lane == 31) wsum[wp] = inc;
        __syncthreads();
        int base = 0;
        for (int k = 0; k < wp; k++) base += wsum[k];
        int ex = base + inc - s;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int e = 4 * tid + k;
            if (e < E) tstart[e] = ex;
            ex += c[k];
        }
        if (tid == M2_THREADS - 1) tstart[E] = ex; // the total
    }
    __syncthreads();
    const int rtiles = (rows + BM - 1) / BM;
    const int items = tstart[E] * rtiles;
#pragma unroll 1
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
        int tile = item / rtiles, rt = item % rtiles;
        int lo = 0, hi = E - 1; // the last expert whose tiles start at or before tile
        while (lo < hi) {
            int mid = (lo + hi + 1) >> 1;
            if (tstart[mid] <= tile) lo = mid;
            else hi = mid - 1;
        }
        int e = lo;
        int begin = offs[e] + (tile - tstart[e]) * BN;
        int nt = min(BN, offs[e + 1] - begin);
        int r0 = rt * BM, nr = min(BM, rows - r0);
        __syncthreads(); // the last item is done with vec, orow and the stages
        if (threadIdx.x < BN) {
            int k = threadIdx.x;
            int ent = list[begin + min(k, nt - 1)];
            vec[k] = xslot ? ent : ent / topk;
            orow[k] = ent;
        }
        __syncthreads();
        m2_tile<M2G_WR, M2G_WN>(m2sm, ord, vec, orow, nt, y, (const float*)0, data + (i64)e * edata,
                                (const u16*)(scales + (i64)e * escale), (const u16*)(biases + (i64)e * escale), r0, nr, rows, G, bits, xq8, xq4, dx, sx);
    }
}

template <int ENC>
__device__ __forceinline__ float fload(const u8* base, i64 i) {
    if (ENC == ENC_F32) return ((const float*)base)[i];
    if (ENC == ENC_BF16) return bf16f(((const u16*)base)[i]);
    return f16f(((const u16*)base)[i]);
}

// frow is one lane's in-order sum over a row: elements lane, lane+8, …,
// loaded 32 at a time into registers before they are added (the loads are
// what takes time; the additions must stay in order).
template <int ENC>
__device__ float frow(const u8* w, const float* xa, int cols, int lane) {
    float acc = 0;
    int i = lane;
    const int B = 32;
    for (; i + 8 * (B - 1) < cols; i += 8 * B) {
        float wv[B], xv[B];
#pragma unroll
        for (int k = 0; k < B; k++) {
            wv[k] = fload<ENC>(w, i + 8 * k);
            xv[k] = xa[i + 8 * k];
        }
#pragma unroll
        for (int k = 0; k < B; k++) acc = __fadd_rn(acc, __fmul_rn(wv[k], xv[k]));
    }
    for (; i < cols; i += 8) acc = __fadd_rn(acc, __fmul_rn(fload<ENC>(w, i), xa[i]));
    return acc;
}

extern "C" __global__ void fgemv(float* y, const u8* data, int enc, int rows, int cols, const float* x,
                                 const float* res, const int* sel, int slots, i64 edata, int xslot) {
    PDL_ENTRY();
    int t = blockIdx.x;
    int grp = threadIdx.x >> 3, lane = threadIdx.x & 7;
    i64 r = (i64)blockIdx.y * (blockDim.x >> 3) + grp;
    bool active = r < (i64)rows * slots;
    if (!active) r = 0;
    int slot = (int)(r / rows), lr = (int)(r % rows);
    int e = sel ? sel[t * slots + slot] : 0;
    int a = xslot ? t * slots + slot : t;
    const float* xa = x + (i64)a * cols;
    const u8* base = data + (i64)e * edata;
    int esize = enc == ENC_F32 ? 4 : 2;
    const u8* w = base + (i64)lr * cols * esize;
    float acc = 0;
    if (active) {
        if (enc == ENC_F32) acc = frow<ENC_F32>(w, xa, cols, lane);
        else if (enc == ENC_BF16) acc = frow<ENC_BF16>(w, xa, cols, lane);
        else acc = frow<ENC_F16>(w, xa, cols, lane);
    }
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 4, 8));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 2, 8));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 1, 8));
    if (active && lane == 0) {
        i64 o = (i64)t * rows * slots + r;
        y[o] = res ? __fadd_rn(res[o], acc) : acc;
    }
}

// fgemm_tiled is fgemv for T > 1 tokens of one matrix (prefill's router
// and other float products): block (token tile, row tile) of FT_R rows ×
// FT_T tokens stages FT_K columns of the rows (widened to float) and of
// the tokens at a time, so each weight is read once per token tile instead
// of once per token. Thread (tr, tt) keeps rows 4tr … 4tr+3 × tokens tt,
// tt+16 with fgemv's 8 lane sums each (column i into sum i mod 8, in
// order), folded as fgemv folds them: bitwise kernels.MatVec. Columns past
// cols are staged as 0 in both: +0 products leave a sum (never −0) as it is.
#define FT_R 32
#define FT_T 32
#define FT_K 64
extern "C" __global__ void __launch_bounds__(128) fgemm_tiled(float* y, const u8* data, int enc, int rows, int cols, const float* x, const float* res, int T) {
    PDL_ENTRY();
    __shared__ float sw[FT_R][FT_K + 1]; // +1: a warp's 16 tokens fall in 16 banks
    __shared__ float sxs[FT_T][FT_K + 1];
    int tid = threadIdx.x, tr = tid >> 4, tt = tid & 15;
    int r0 = blockIdx.y * FT_R, t0 = blockIdx.x * FT_T;
    float p[4][2][8];
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int k = 0; k < 2; k++)
#pragma unroll
            for (int l = 0; l < 8; l++) p[m][k][l] = 0;
    for (int c0 = 0; c0 < cols; c0 += FT_K) {
        __syncthreads(); // the last chunk is read
        for (int i = tid; i < FT_R * FT_K; i += 128) {
            int rr = i / FT_K, cc = i % FT_K, r = r0 + rr, c = c0 + cc;
            float v = 0;
            if (r < rows && c < cols) {
                i64 idx = (i64)r * cols + c;
                if (enc == ENC_F32) v = ((const float*)data)[idx];
                else if (enc == ENC_BF16) v = bf16f(((const u16*)data)[idx]);
                else v = f16f(((const u16*)data)[idx]);
            }
            sw[rr][cc] = v;
        }
        for (int i = tid; i < FT_T * FT_K; i += 128) {
            int tk = i / FT_K, cc = i % FT_K, t = t0 + tk, c = c0 + cc;
            sxs[tk][cc] = t < T && c < cols ? x[(i64)t * cols + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < FT_K; i++) {
            float wv[4], xv[2];
#pragma unroll
            for (int m = 0; m < 4; m++) wv[m] = sw[4 * tr + m][i];
#pragma unroll
            for (int k = 0; k < 2; k++) xv[k] = sxs[tt + 16 * k][i];
#pragma unroll
            for (int m = 0; m < 4; m++)
#pragma unroll
                for (int k = 0; k < 2; k++) p[m][k][i & 7] = __fadd_rn(p[m][k][i & 7], __fmul_rn(wv[m], xv[k]));
        }
    }
#pragma unroll
    for (int m = 0; m < 4; m++) {
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int r = r0 + 4 * tr + m, t = t0 + tt + 16 * k;
            // fgemv's fold: lanes l and l+4, then l and l+2, then 0 and 1.
            float a0 = __fadd_rn(p[m][k][0], p[m][k][4]), a1 = __fadd_rn(p[m][k][1], p[m][k][5]);
            float a2 = __fadd_rn(p[m][k][2], p[m][k][6]), a3 = __fadd_rn(p[m][k][3], p[m][k][7]);
            float v = __fadd_rn(__fadd_rn(a0, a2), __fadd_rn(a1, a3));
            if (r < rows && t < T) {
                i64 o = (i64)t * rows + r;
                y[o] = res ? __fadd_rn(res[o], v) : v;
            }
        }
    }
}

// frow_fold is one row of fgemv: the lane's in-order sum, then the 8 lanes
// folded as kernels.MatVec does; lane 0 returns the row's product.
__device__ __forceinline__ float frow_fold(int enc, const u8* w, const float* xa, int cols, int lane, bool active) {
    float acc = 0;
    if (active) {
        if (enc == ENC_F32) acc = frow<ENC_F32>(w, xa, cols, lane);
        else if (enc == ENC_BF16) acc = frow<ENC_BF16>(w, xa, cols, lane);
        else acc = frow<ENC_F16>(w, xa, cols, lane);
    }
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 4, 8));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 2, 8));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 1, 8));
    return acc;
}

// ---------------------------------------------------------------------------
// Fused launches.

// mgemv is several products of one input in one launch: segment j is a
// matrix (or slots gathered experts) with its own output, and blocks
// [blk0_j, blk0_j+1) are its. Q4/Q8 segments read the quantized input
// (qrow, as qgemv), float ones x (frow_fold, as fgemv), so every row gets
// the arithmetic of the one-matrix kernels. Token t's row r goes to
// y[t·ytok + r]. All fields are 64-bit so the Go side lays the struct out
// without padding.
#define MSEG 8
struct MSeg {
    i64 y, data, scales, biases, res, sel, edata, escale;
    i64 rows, cols, enc, slots, lanes, blk0, ytok, pad;
};
struct MSegs {
    MSeg s[MSEG];
    i64 n;
};

// frow_staged is frow_fold for a block of FROWS float rows of a segment:
// the rows and x are first copied to shared memory a chunk at a time by the
// whole block (16-byte loads, all in flight), then each row's 8 lanes sum
// their elements from there in frow's order. A row through frow alone is a
// chain of dependent 32-load batches (~17 µs for the 2048-wide a|b and
// router rows); this is one round trip per 4 KiB chunk.
// fsum continues a lane's in-order sum over staged elements lane, lane+8, …
template <int ENC>
__device__ __forceinline__ float fsum(float acc, const u8* w, const float* xs, int n, int lane) {
#pragma unroll 8
    for (int i = lane; i < n; i += 8) acc = __fadd_rn(acc, __fmul_rn(fload<ENC>(w, i), xs[i]));
    return acc;
}

#define FROWS 8
#define FCHUNK 4096 // bytes of a row per chunk
#define FPITCH (FCHUNK + 16) // row pitch in shared memory: rows in other banks
// xs is the caller's [FCHUNK/2] shared buffer x is staged in, or null when
// xa is the whole row already in shared memory (mgemv_n).
__device__ float frow_staged(const MSeg& s, int t, int by, const float* xa, int lane, int grp, bool active, float* xs) {
    __shared__ __align__(16) u8 stg[FROWS * FPITCH];
    int enc = (int)s.enc, rows = (int)s.rows, cols = (int)s.cols, slots = (int)s.slots;
    int esize = enc == ENC_F32 ? 4 : 2, per = FCHUNK / esize;
    const int* sel = (const int*)s.sel;
    const u8* base[FROWS];
#pragma unroll
    for (int rr = 0; rr < FROWS; rr++) {
        i64 r = (i64)(by - s.blk0) * FROWS + rr;
        if (r >= (i64)rows * slots) r = 0; // staged, never summed
        int slot = (int)(r / rows), lr = (int)(r % rows);
        i64 e = sel ? sel[t * slots + slot] : 0;
        base[rr] = (const u8*)s.data + e * s.edata + (i64)lr * cols * esize;
    }
    float acc = 0;
    for (int c0 = 0; c0 < cols; c0 += per) {
        int n = min(per, cols - c0), nb = n * esize;
        __syncthreads(); // the previous chunk is summed
        bool vec = (nb & 15) == 0;
#pragma unroll
        for (int rr = 0; rr < FROWS; rr++) vec = vec && (((unsigned long long)(base[rr] + (i64)c0 * esize)) & 15) == 0;
        if (vec) {
            for (int i = threadIdx.x; i < nb / 16; i += blockDim.x) {
                uint4 v[FROWS];
#pragma unroll
                for (int rr = 0; rr < FROWS; rr++) v[rr] = ((const uint4*)(base[rr] + (i64)c0 * esize))[i];
#pragma unroll
                for (int rr = 0; rr < FROWS; rr++) ((uint4*)(stg + rr * FPITCH))[i] = v[rr];
            }
        } else {
            for (int i = threadIdx.x; i < nb; i += blockDim.x) {
                u8 v[FROWS];
#pragma unroll
                for (int rr = 0; rr < FROWS; rr++) v[rr] = base[rr][(i64)c0 * esize + i];
#pragma unroll
                for (int rr = 0; rr < FROWS; rr++) stg[rr * FPITCH + i] = v[rr];
            }
        }
        const float* xc = xa + c0;
        if (xs) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = xa[c0 + i];
            xc = xs;
        }
        __syncthreads();
        if (active) {
            const u8* w = stg + grp * FPITCH;
            if (enc == ENC_BF16) acc = fsum<ENC_BF16>(acc, w, xc, n, lane);
            else if (enc == ENC_F32) acc = fsum<ENC_F32>(acc, w, xc, n, lane);
            else acc = fsum<ENC_F16>(acc, w, xc, n, lane);
        }
    }
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 4, 8));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 2, 8));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 1, 8));
    return acc;
}

// mgemv_body is mgemv's block: xq8…sx hold the quantized input vectors
// (vector a of token t), x the float ones [T, cols] (xs: frow_staged's).
__device__ __forceinline__ void mgemv_body(const MSegs& p, const signed char* xq8, const int* xq4, const float* dx, const float* sx,
                                           const float* xa, i64 a, float* xs) {
    int t = blockIdx.x, by = blockIdx.y;
    MSeg s = p.s[0];
#pragma unroll
    for (int i = 1; i < MSEG; i++) // constant indices: no local copy of the table
        if (i < p.n && by >= p.s[i].blk0) s = p.s[i];
    int lanes = (int)s.lanes, rows = (int)s.rows, cols = (int)s.cols, slots = (int)s.slots;
    int grp = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    bool quant = s.enc == ENC_Q4 || s.enc == ENC_Q8;
    int rpb = quant ? blockDim.x / lanes : FROWS; // float rows: FROWS a block (frow_staged)
    i64 r = (i64)(by - s.blk0) * rpb + grp;
    bool active = grp < rpb && r < (i64)rows * slots;
    if (!active) r = 0;
    int slot = (int)(r / rows), lr = (int)(r % rows);
    const int* sel = (const int*)s.sel;
    i64 e = sel ? sel[t * slots + slot] : 0;
    float acc;
    if (quant) {
        int bits = s.enc == ENC_Q4 ? 4 : 8, groups = cols / 64;
        const u8* w = (const u8*)s.data + e * s.edata + (i64)lr * (cols * bits / 8);
        const u16* sc = (const u16*)((const u8*)s.scales + e * s.escale) + (i64)lr * groups;
        const u16* bi = (const u16*)((const u8*)s.biases + e * s.escale) + (i64)lr * groups;
        acc = qrow(w, sc, bi, groups, bits, xq8, xq4, dx, sx, a, lane, lanes, active);
    } else {
        acc = frow_staged(s, t, by, xa, lane, grp, active, xs);
    }
    if (active && lane == 0) {
        i64 o = (i64)t * s.ytok + r;
        const float* res = (const float*)s.res;
        ((float*)s.y)[o] = res ? __fadd_rn(res[o], acc) : acc;
    }
}

extern "C" __global__ void mgemv(MSegs p, const signed char* xq8, const int* xq4, const float* dx, const float* sx, const float* x) {
    PDL_ENTRY();
    __shared__ __align__(16) float xs[FCHUNK / 2];
    int cols = (int)p.s[0].cols;
    mgemv_body(p, xq8, xq4, dx, sx, x + (i64)blockIdx.x * cols, blockIdx.x, xs);
}

// norm_q_block is rmsnorm_q of one row x [n] by a block of 256 threads,
// into shared memory: us [n] the normed row, q8, q4, dx, sx its
// quantization (quant_warp's layout for one vector). Bitwise rmsnorm_q
// launched with vt threads (RMSNormQuantize's choice: a multiple of 32
// from 256 to 1024): the
// float64 sum of squares is inv_rms's tree over vt threads, each thread
// here standing for vt/256 of them (virtual thread tid + 256j, whose warp
// is warp + 8j), the warps' sums added in order by thread 0. Ends with
// the block synchronized.
__device__ void norm_q_block(const float* x, const float* scale, int n, float eps, int vt, float* us, signed char* q8, int* q4,
                             float* dx, float* sx, float (*vs)[64], signed char (*qs)[64], double* sh) {
    int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    double part[4];
#pragma unroll
    for (int j = 0; j < 4; j++) { // vt is a multiple of 32: a virtual warp is whole or absent
        double ss = 0;
        if (tid + 256 * j < vt)
            for (int i = tid + 256 * j; i < n; i += vt) ss += (double)x[i] * (double)x[i];
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        part[j] = ss;
    }
    if (lane == 0)
        for (int j = 0; j < 4 && tid + 256 * j < vt; j++) sh[w + 8 * j] = part[j];
    __syncthreads();
    if (tid == 0) {
        double r = 0;
        for (int i = 0; i < (vt >> 5); i++) r += sh[i];
        sh[0] = r;
    }
    __syncthreads();
    float mean = (float)(sh[0] / (double)n);
    float inv = (float)(1.0 / sqrt((double)__fadd_rn(mean, eps)));
    for (int i = tid; i < n; i += blockDim.x) us[i] = __fmul_rn(__fmul_rn(x[i], inv), scale[i]);
    __syncthreads();
    for (int g = w; g < n / 64; g += blockDim.x >> 5)
        quant_warp(us[g * 64 + lane], us[g * 64 + lane + 32], g, lane, vs[w], qs[w], q8, q4, dx, sx);
    __syncthreads();
}

// mgemv_n is rmsnorm_q of token t's row of x (scale, eps, vt as
// RMSNormQuantize launches it) and then mgemv over the result, in one
// launch (Set.NormFold): every block normalizes and quantizes the row into
// its own shared memory (norm_q_block), so the products start without a
// launch between; the blocks of y = 0 also store the row and its
// quantization (u, gq8…gsx, as rmsnorm_q stores them) for the launches
// after this one. cols ≤ NF_MAXC: 48,256 bytes of static shared memory
// with frow_staged's rows.
#define NF_MAXC 2048
extern "C" __global__ void __launch_bounds__(256) mgemv_n(MSegs p, const float* x, const float* scale, float eps, int vt, float* u,
                                                         signed char* gq8, int* gq4, float* gdx, float* gsx) {
    PDL_ENTRY();
    __shared__ __align__(16) float us[NF_MAXC];
    __shared__ __align__(16) signed char q8s[NF_MAXC];
    __shared__ __align__(16) int q4s[NF_MAXC / 4];
    __shared__ float dxs[NF_MAXC / 64], sxs[NF_MAXC / 64];
    __shared__ float vs[8][64];
    __shared__ signed char qs[8][64];
    __shared__ double sh[32];
    int t = blockIdx.x, n = (int)p.s[0].cols, groups = n / 64;
    norm_q_block(x + (i64)t * n, scale, n, eps, vt, us, q8s, q4s, dxs, sxs, vs, qs, sh);
    if (blockIdx.y == 0) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            u[(i64)t * n + i] = us[i];
            gq8[(i64)t * n + i] = q8s[i];
        }
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x) gq4[(i64)t * (n / 4) + i] = q4s[i];
        for (int i = threadIdx.x; i < groups; i += blockDim.x) {
            gdx[(i64)t * groups + i] = dxs[i];
            gsx[(i64)t * groups + i] = sxs[i];
        }
    }
    mgemv_body(p, q8s, q4s, dxs, sxs, us, 0, 0);
}

// moe_down is the routed experts' down products, the shared expert's and
// combine in one launch: for token t and output row i, the k gathered rows
// (expert sel[t·k+s] times input vector t·(k+1)+s) and the shared expert's
// row (times vector t·(k+1)+k), each a qrow as qgemv computes it, then
// x += Σ_s w_s·y_s (ascending s) + sigmoid(gate)·y_shared, combine's order.
// A block holds R output rows, (k+1) products each, a lane group a product.
extern "C" __global__ void moe_down(float* x, const u8* data, const u8* scales, const u8* biases, i64 edata, i64 escale,
                                    const u8* sdata, const u8* sscales, const u8* sbiases, int rows, int cols, int bits,
                                    const signed char* xq8, const int* xq4, const float* dx, const float* sx,
                                    const int* sel, const float* weight, const float* gateLogit, int k, int gstride, int lanes, int R) {
    PDL_ENTRY();
    __shared__ float dots[1024];
    int t = blockIdx.x;
    int ngrp = blockDim.x / lanes, grp = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    int per = k + 1, items = R * per, groups = cols / 64;
    i64 rowBytes = (i64)cols * bits / 8;
    for (int it0 = 0; it0 < items; it0 += ngrp) { // the same trips for every thread: qrow shuffles
        int it = it0 + grp;
        bool active = it < items;
        int rr = active ? it / per : 0, s = active ? it % per : 0;
        i64 row = (i64)blockIdx.y * R + rr;
        if (row >= rows) active = false;
        if (!active) row = 0;
        const u8* w;
        const u16 *sc, *bi;
        if (s < k) {
            i64 e = sel[t * k + s];
            w = data + e * edata + row * rowBytes;
            sc = (const u16*)(scales + e * escale) + row * groups;
            bi = (const u16*)(biases + e * escale) + row * groups;
        } else {
            w = sdata + row * rowBytes;
            sc = (const u16*)sscales + row * groups;
            bi = (const u16*)sbiases + row * groups;
        }
        float acc = qrow(w, sc, bi, groups, bits, xq8, xq4, dx, sx, (i64)t * per + s, lane, lanes, active);
        if (active && lane == 0) dots[rr * per + s] = acc;
    }
    __syncthreads();
    if (threadIdx.x < R) {
        i64 row = (i64)blockIdx.y * R + threadIdx.x;
        if (row < rows) {
            const float* d = dots + threadIdx.x * per;
            float acc = 0;
            for (int s = 0; s < k; s++) acc = __fadd_rn(acc, __fmul_rn(weight[t * k + s], d[s]));
            float sg = sigmoid64(gateLogit[(i64)t * gstride]);
            acc = __fadd_rn(acc, __fmul_rn(sg, d[k]));
            i64 o = (i64)t * rows + row;
            x[o] = __fadd_rn(x[o], acc);
        }
    }
}

// moe_group lists a chunk's n = T·k (token, slot) entries by expert: entries
// offs[e] … offs[e+1]−1 of list are expert e's values of t·k+s, ascending.
// One block of GROUP_THREADS: the counts (shared atomics: exact in any
// order), their exclusive scan, then the entries GROUP_THREADS at a time in
// order: an entry's place is its expert's running count plus the entries
// of its warp before it with the same expert (match.any), the warps of a
// tile taking their turn one after another. (It was one thread per expert
// scanning every entry: 4 ms of a 512-token chunk.)
#define GROUP_THREADS 1024
__device__ __forceinline__ u32 match_any(int v) {
    u32 m;
#if defined(NVMAI_EMU)
    m = emu_match_any(0xffffffffu, (u32)v);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("match.any.sync.b32 %0, %1, 0xffffffff;" : "=r"(m) : "r"(v));
#else
    m = 0;
    __trap();
#endif
    return m;
}

extern "C" __global__ void __launch_bounds__(GROUP_THREADS) moe_group(int* offs, int* list, const int* sel, int n, int E) {
    PDL_ENTRY();
    __shared__ int cnt[1024];
    __shared__ int wtot[32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    cnt[tid] = 0; // E ≤ 1024 = GROUP_THREADS
    __syncthreads();
    for (int i = tid; i < n; i += GROUP_THREADS) {
        int e = sel[i];
        if ((u32)e < (u32)E) atomicAdd(&cnt[e], 1); // an expert out of range is left out of the lists
    }
    __syncthreads();
    {
        int v = cnt[tid], inc = v;
        for (int o = 1; o < 32; o <<= 1) {
            int u = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += u;
        }
        if (lane == 31) wtot[warp] = inc;
        __syncthreads();
        if (warp == 0) {
            int t = wtot[lane];
            for (int o = 1; o < 32; o <<= 1) {
                int u = __shfl_up_sync(0xffffffffu, t, o);
                if (lane >= o) t += u;
            }
            wtot[lane] = t; // inclusive over warps
        }
        __syncthreads();
        int ex = inc - v + (warp > 0 ? wtot[warp - 1] : 0);
        if (tid < E) offs[tid] = ex;
        if (tid == 0) offs[E] = wtot[31];
        cnt[tid] = ex; // the expert's next place
    }
    for (int base = 0; base < n; base += GROUP_THREADS) {
        int i = base + tid;
        int e = i < n ? sel[i] : -1;
        bool valid = (u32)e < (u32)E;
        if (!valid) e = -1;
        u32 mask = match_any(e);
        int rank = __popc(mask & ((1u << lane) - 1u)), same = __popc(mask);
        for (int w = 0; w < GROUP_THREADS / 32; w++) {
            __syncthreads(); // the warps before w have moved the counts
            if (warp == w) {
                int at = valid ? cnt[e] : 0;
                __syncwarp();
                if (valid) {
                    list[at + rank] = i;
                    if (rank == same - 1) cnt[e] = at + same;
                }
            }
        }
    }
}

// moe_group_seq (moe_group before session 17, the default until its
// replacement runs on a GPU) lists a chunk's n = T·k (token, slot) entries by expert: entries
// offs[e] … offs[e+1]−1 of list are expert e's values of t·k+s, ascending.
// One block; sel is read through shared memory in tiles.
#define GROUP_TILE 2048
extern "C" __global__ void moe_group_seq(int* offs, int* list, const int* sel, int n, int E) {
    PDL_ENTRY();
    __shared__ int cnt[1024];
    __shared__ int tile[GROUP_TILE];
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int base = 0; base < n; base += GROUP_TILE) {
            int m = min(GROUP_TILE, n - base);
            __syncthreads();
            for (int i = threadIdx.x; i < m; i += blockDim.x) tile[i] = sel[base + i];
            __syncthreads();
            for (int e = threadIdx.x; e < E; e += blockDim.x) {
                int c = cnt[e];
                for (int i = 0; i < m; i++)
                    if (tile[i] == e) {
                        if (pass == 1) list[c] = base + i;
                        c++;
                    }
                cnt[e] = c;
            }
        }
        __syncthreads();
        if (pass == 0 && threadIdx.x == 0) { // counts to starting offsets
            int acc = 0;
            for (int e = 0; e < E; e++) {
                int c = cnt[e];
                cnt[e] = acc;
                offs[e] = acc;
                acc += c;
            }
            offs[E] = acc;
        }
        __syncthreads();
    }
}

// qgemv_grouped is a chunk's gathered expert product expert by expert
// (prefill): block (e, row block) multiplies expert e's rows by its entries
// (moe_group), QTB at a time, so each expert's weights are read once per
// chunk instead of once per token. Entry i = t·k+s reads activation vector
// i (xslot) or t and writes y[i·rows + row]; each row is qgemv_tb's
// arithmetic (16 lanes).
extern "C" __global__ void qgemv_grouped(float* y, const u8* data, const u8* scales, const u8* biases, int rows, int cols, int bits,
                                         const signed char* xq8, const int* xq4, const float* dx, const float* sx,
                                         const int* offs, const int* list, int topk, i64 edata, i64 escale, int xslot) {
    PDL_ENTRY();
    int e = blockIdx.x;
    int begin = offs[e], end = offs[e + 1];
    if (begin >= end) return; // the whole block: no shuffles reached
    int half = threadIdx.x >> 4, lane = threadIdx.x & 15;
    i64 r = (i64)blockIdx.y * (blockDim.x >> 4) + half;
    bool active = r < rows;
    if (!active) r = 0;
    int groups = cols / 64;
    const u8* w = data + (i64)e * edata + r * (cols * bits / 8);
    const u16* sc = (const u16*)(scales + (i64)e * escale) + r * groups;
    const u16* bi = (const u16*)(biases + (i64)e * escale) + r * groups;
    for (int i0 = begin; i0 < end; i0 += QTB) {
        int nt = min(QTB, end - i0);
        int ent[QTB], vec[QTB]; // entry, and its activation vector
        float acc[QTB];
#pragma unroll
        for (int k = 0; k < QTB; k++) {
            ent[k] = k < nt ? list[i0 + k] : 0;
            vec[k] = xslot ? ent[k] : ent[k] / topk;
            acc[k] = 0;
        }
        if (active) {
#pragma unroll 2
            for (int g = lane; g < groups; g += 16) {
                uint4 w0, w1, w2 = make_uint4(0, 0, 0, 0), w3 = make_uint4(0, 0, 0, 0);
                if (bits == 4) {
                    const uint4* wp = (const uint4*)(w + g * 32);
                    w0 = wp[0]; w1 = wp[1];
                } else {
                    const uint4* wp = (const uint4*)(w + g * 64);
                    w0 = wp[0]; w1 = wp[1]; w2 = wp[2]; w3 = wp[3];
                }
                float s = bf16f(sc[g]), b = bf16f(bi[g]);
#pragma unroll
                for (int k = 0; k < QTB; k++) {
                    if (k < nt) {
                        i64 ag = (i64)vec[k] * groups + g;
                        int d = qdot(bits, w0, w1, w2, w3, xq8, xq4, ag);
                        float mul = __fmul_rn(s, dx[ag]);
                        float tt = __fmul_rn(mul, (float)d);
                        float u = __fmul_rn(b, sx[ag]);
                        acc[k] = __fadd_rn(acc[k], __fadd_rn(tt, u));
                    }
                }
            }
        }
#pragma unroll
        for (int k = 0; k < QTB; k++) {
            float v = acc[k];
            v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, 8, 16));
            v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, 4, 16));
            v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, 2, 16));
            v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, 1, 16));
            if (active && lane == 0 && k < nt) y[(i64)ent[k] * rows + r] = v;
        }
    }
}

// ---------------------------------------------------------------------------
// Gated DeltaNet.

// gdn_conv: the depthwise causal conv + SiLU over T tokens (qwen35
// causalConv): taps summed in order from zero, then the last K−1
// projections stay in state [K−1, C]. Every output depends only on its K
// inputs, so thread (c, token block y) computes channel c for tokens
// CONV_TB·y … CONV_TB·y+CONV_TB−1 (the chunk's tokens in parallel, not one
// thread walking all T). Only block row y = 0 reads the old state (CONV_TB
// ≥ K−1), and each of its threads writes its channel's new state after
// its own reads, so no thread reads a state another overwrote.
#define CONV_TB 16

template <int KK> // KK taps, or 0: K at run time (at most 8)
__device__ __forceinline__ void conv_run(float* out, const float* proj, float* state, const float* w, int C, int Kr, int T, int c) {
    const int K = KK ? KK : Kr;
    int t0 = blockIdx.y * CONV_TB, t1 = min(T, t0 + CONV_TB);
    float wc[KK ? KK : 8], win[KK ? KK : 8];
#pragma unroll
    for (int j = 0; j < (KK ? KK : 8); j++)
        if (j < K) wc[j] = w[(i64)c * K + j];
#pragma unroll
    for (int j = 0; j < (KK ? KK : 8) - 1; j++) {
        if (j < K - 1) {
            int s = t0 - (K - 1) + j; // chunk-relative token; < 0: a state row
            win[j] = s >= 0 ? proj[(i64)s * C + c] : state[(i64)(K - 1 + s) * C + c];
        }
    }
    for (int t = t0; t < t1; t++) {
        win[K - 1] = proj[(i64)t * C + c];
        float acc = 0;
#pragma unroll
        for (int j = 0; j < (KK ? KK : 8); j++)
            if (j < K) acc = __fadd_rn(acc, __fmul_rn(wc[j], win[j]));
        out[(i64)t * C + c] = __fmul_rn(acc, sigk(acc));
#pragma unroll
        for (int j = 0; j < (KK ? KK : 8) - 1; j++)
            if (j < K - 1) win[j] = win[j + 1];
    }
    if (blockIdx.y == 0) {
        // Row r takes token T−(K−1)+r; a row still in the state moves to a
        // lower index, so ascending r reads every row before it is written.
        for (int r = 0; r < K - 1; r++) {
            int s = T - (K - 1) + r;
            state[(i64)r * C + c] = s >= 0 ? proj[(i64)s * C + c] : state[(i64)(K - 1 + s) * C + c];
        }
    }
}

extern "C" __global__ void gdn_conv(float* out, const float* proj, float* state, const float* w, int C, int K, int T) {
    PDL_ENTRY();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    if (K == 4) conv_run<4>(out, proj, state, w, C, K, T, c);
    else conv_run<0>(out, proj, state, w, C, K, T, c);
}

// gdn_conv_seq (gdn_conv before session 17, the default until its
// replacement runs on a GPU): the depthwise causal conv + SiLU over T tokens (qwen35
// causalConv): thread per channel, taps summed in order from zero, then the
// last K−1 projections stay in state [K−1, C].
extern "C" __global__ void gdn_conv_seq(float* out, const float* proj, float* state, const float* w, int C, int K, int T) {
    PDL_ENTRY();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float win[8];
    for (int j = 0; j < K - 1; j++) win[j] = state[(i64)j * C + c];
    for (int t = 0; t < T; t++) {
        win[K - 1] = proj[(i64)t * C + c];
        float acc = 0;
        for (int j = 0; j < K; j++) acc = __fadd_rn(acc, __fmul_rn(w[c * K + j], win[j]));
        out[(i64)t * C + c] = __fmul_rn(acc, sigk(acc));
        for (int j = 0; j < K - 1; j++) win[j] = win[j + 1];
    }
    for (int j = 0; j < K - 1; j++) state[(i64)j * C + c] = win[j];
}

// stage copies n floats by the whole block, 16 bytes a load when n and
// both pointers allow, many loads in flight.
__device__ void stage(float* dst, const float* src, int n) {
    if ((n & 3) == 0 && ((unsigned long long)dst & 15) == 0 && ((unsigned long long)src & 15) == 0) {
        float4* d = (float4*)dst;
        const float4* s4 = (const float4*)src;
#pragma unroll 8
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x) d[i] = s4[i];
    } else {
#pragma unroll 8
        for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    }
}

// gdn_heads: per value head (block) and token, the L2-normed q and k, the
// gates, the delta rule (kernels.DeltaRule, a thread per value column) and
// the gated RMSNorm (qwen35 gatedNorm). conv [T, C] = q | k | v; z [T, Hv·Dv];
// a, b [T, Hv]; state S [Hv, Dk, Dv] is staged in shared memory for the
// chunk; o [T, Hv·Dv]. Sums that qwen35 runs in float64 in index order are
// run so here, by one thread over shared copies.
extern "C" __global__ void gdn_heads(float* o, float* S, const float* conv, const float* z, const float* a, const float* b,
                                     const float* negExpA, const float* dtBias, const float* normW,
                                     int C, int Hk, int Hv, int Dk, int Dv, float eps, int T, int abStride) {
    PDL_ENTRY();
    extern __shared__ float smem[];
    float* q = smem;           // [Dk]
    float* k = q + Dk;         // [Dk]
    float* ov = k + Dk;        // [Dv]
    float* Ss = ov + Dv;       // [Dk, Dv]
    __shared__ float gate[3];
    int h = blockIdx.x, j = threadIdx.x;
    int ratio = Hv / Hk, kh = h / ratio;
    int kd = Hk * Dk, vd = Hv * Dv;
    float qScale = (float)(1.0 / sqrt((double)Dk));
    float* Sh = S + (i64)h * Dk * Dv;
    stage(Ss, Sh, Dk * Dv);
    for (int t = 0; t < T; t++) {
        const float* row = conv + (i64)t * C;
        for (int i = threadIdx.x; i < Dk; i += blockDim.x) {
            q[i] = row[kh * Dk + i];
            k[i] = row[kd + kh * Dk + i];
        }
        __syncthreads();
        if (threadIdx.x == 0) { // l2NormScaled's sums, index order, float64
            double sq = 0;
            for (int i = 0; i < Dk; i++) sq += (double)q[i] * (double)q[i];
            gate[0] = (float)(1.0 / sqrt((double)__fadd_rn((float)sq, 1e-6f)));
        } else if (threadIdx.x == 32) {
            double sk = 0;
            for (int i = 0; i < Dk; i++) sk += (double)k[i] * (double)k[i];
            gate[1] = (float)(1.0 / sqrt((double)__fadd_rn((float)sk, 1e-6f)));
        } else if (threadIdx.x == 64 || (blockDim.x <= 64 && threadIdx.x == 1)) {
            float g = __fmul_rn(negExpA[h], softplus64(__fadd_rn(a[t * abStride + h], dtBias[h])));
            gate[2] = exp64(g);
        }
        __syncthreads();
        float iq = gate[0], ik = gate[1], decay = gate[2];
        float beta = sigmoid64(b[t * abStride + h]);
        __syncthreads();
        for (int i = threadIdx.x; i < Dk; i += blockDim.x) {
            q[i] = __fmul_rn(__fmul_rn(q[i], iq), qScale);
            k[i] = __fmul_rn(__fmul_rn(k[i], ik), 1.0f);
        }
        __syncthreads();
        if (j < Dv) {
            float p = 0;
#pragma unroll 8
            for (int i = 0; i < Dk; i++) p = __fadd_rn(p, __fmul_rn(__fmul_rn(Ss[i * Dv + j], decay), k[i]));
            float delta = __fmul_rn(__fsub_rn(row[2 * kd + h * Dv + j], p), beta);
            float out = 0;
#pragma unroll 8
            for (int i = 0; i < Dk; i++) {
                float sv = __fadd_rn(__fmul_rn(Ss[i * Dv + j], decay), __fmul_rn(k[i], delta));
                Ss[i * Dv + j] = sv;
                out = __fadd_rn(out, __fmul_rn(sv, q[i]));
            }
            ov[j] = out;
        }
        __syncthreads();
        if (threadIdx.x == 0) { // gatedNorm's invRMS, index order, float64
            double ss = 0;
            for (int i = 0; i < Dv; i++) ss += (double)ov[i] * (double)ov[i];
            float mean = (float)(ss / (double)Dv);
            gate[0] = (float)(1.0 / sqrt((double)__fadd_rn(mean, eps)));
        }
        __syncthreads();
        if (j < Dv) {
            float zz = z[(i64)t * vd + h * Dv + j];
            float sz = __fmul_rn(zz, sigk(zz));
            o[(i64)t * vd + h * Dv + j] = __fmul_rn(__fmul_rn(normW[j], __fmul_rn(ov[j], gate[0])), sz);
        }
        __syncthreads();
    }
    __syncthreads();
    stage(Sh, Ss, Dk * Dv);
}

// gdn_rec is gdn_heads' delta rule split by columns: block (h, y) owns
// value columns 32y … 32y+31 of head h (the delta rule's columns are
// independent), whose state slice [Dk, 32] it keeps in shared memory over
// the chunk. All 128 threads stage the slice (16-byte loads, one round
// trip) and compute every token's scalars in parallel, four threads a
// token: q's and k's inverse L2 norms (float64 sums in index order, as
// gdn_heads, over q and k staged in shared memory for short chunks), the
// decay and beta. Then warp 0 runs the tokens in order with gdn_heads'
// arithmetic, loading the next token's q, k and v while it computes, and
// writes the raw outputs to oraw [T, Hv·Dv] for gdn_norm. Dk is a multiple
// of 32 up to 128 (GDNSplitFits).
#define GDN_STAGE_T 8 // chunks this short stage q and k for the norms
extern "C" __global__ void gdn_rec(float* oraw, float* S, const float* conv, const float* a, const float* b,
                                   const float* negExpA, const float* dtBias, int C, int Hk, int Hv, int Dk, int Dv, int T, int abStride) {
    PDL_ENTRY();
    extern __shared__ __align__(16) float smem[];
    float* Ss = smem;        // [Dk][32]
    float* q = Ss + Dk * 32; // [Dk]
    float* k = q + Dk;       // [Dk]
    float* tok = k + Dk;     // [T][4]: iq, ik, decay, beta
    float* qk = tok + 4 * T; // [GDN_STAGE_T][2·Dk] when T ≤ GDN_STAGE_T
    int h = blockIdx.x, j0 = blockIdx.y * 32, tid = threadIdx.x, lane = tid & 31;
    int ratio = Hv / Hk, kh = h / ratio;
    int kd = Hk * Dk, vd = Hv * Dv;
    float qScale = (float)(1.0 / sqrt((double)Dk));
    float* Sh = S + (i64)h * Dk * Dv;
    bool full = j0 + 32 <= Dv && (Dv & 3) == 0;
    if (full) { // 8 float4 a row of the slice
        for (int i = tid; i < Dk * 8; i += blockDim.x) {
            int r = i >> 3, c = (i & 7) * 4;
            *(float4*)(Ss + r * 32 + c) = *(const float4*)(Sh + (i64)r * Dv + j0 + c);
        }
    } else {
        for (int i = tid; i < Dk * 32; i += blockDim.x) {
            int r = i >> 5, c = i & 31;
            Ss[i] = j0 + c < Dv ? Sh[(i64)r * Dv + j0 + c] : 0.0f;
        }
    }
    bool staged = T <= GDN_STAGE_T;
    if (staged)
        for (int i = tid; i < T * 2 * Dk; i += blockDim.x) {
            int t = i / (2 * Dk), c = i % (2 * Dk);
            qk[i] = conv[(i64)t * C + (c < Dk ? kh * Dk + c : kd + kh * Dk + c - Dk)];
        }
    __syncthreads();
    for (int i = tid; i < 4 * T; i += blockDim.x) {
        int t = i >> 2, what = i & 3;
        if (what < 2) { // l2NormScaled's sum, index order, float64
            const float* src = staged ? qk + t * 2 * Dk + what * Dk : conv + (i64)t * C + what * kd + kh * Dk;
            double sq = 0;
#pragma unroll 8
            for (int c = 0; c < Dk; c++) sq += (double)src[c] * (double)src[c];
            tok[i] = (float)(1.0 / sqrt((double)__fadd_rn((float)sq, 1e-6f)));
        } else if (what == 2) {
            float g = __fmul_rn(negExpA[h], softplus64(__fadd_rn(a[t * abStride + h], dtBias[h])));
            tok[i] = exp64(g);
        } else {
            tok[i] = sigmoid64(b[t * abStride + h]);
        }
    }
    __syncthreads();
    if (tid < 32) {
        int j = j0 + lane, per = Dk / 32;
        bool col = j < Dv;
        float qn[4], kn[4], vn = 0; // the next token's q, k (lane, lane+32, …) and v
        const float* row = conv;
#pragma unroll
        for (int m = 0; m < 4; m++)
            if (m < per) {
                qn[m] = row[kh * Dk + lane + 32 * m];
                kn[m] = row[kd + kh * Dk + lane + 32 * m];
            }
        if (col) vn = row[2 * kd + h * Dv + j];
        for (int t = 0; t < T; t++) {
            float iq = tok[4 * t], ik = tok[4 * t + 1], decay = tok[4 * t + 2], beta = tok[4 * t + 3];
#pragma unroll
            for (int m = 0; m < 4; m++)
                if (m < per) {
                    q[lane + 32 * m] = __fmul_rn(__fmul_rn(qn[m], iq), qScale);
                    k[lane + 32 * m] = __fmul_rn(__fmul_rn(kn[m], ik), 1.0f);
                }
            float vj = vn;
            if (t + 1 < T) {
                row = conv + (i64)(t + 1) * C;
#pragma unroll
                for (int m = 0; m < 4; m++)
                    if (m < per) {
                        qn[m] = row[kh * Dk + lane + 32 * m];
                        kn[m] = row[kd + kh * Dk + lane + 32 * m];
                    }
                if (col) vn = row[2 * kd + h * Dv + j];
            }
            __syncwarp();
            if (col) {
                float p = 0;
#pragma unroll 8
                for (int i = 0; i < Dk; i++) p = __fadd_rn(p, __fmul_rn(__fmul_rn(Ss[i * 32 + lane], decay), k[i]));
                float delta = __fmul_rn(__fsub_rn(vj, p), beta);
                float out = 0;
#pragma unroll 8
                for (int i = 0; i < Dk; i++) {
                    float sv = __fadd_rn(__fmul_rn(Ss[i * 32 + lane], decay), __fmul_rn(k[i], delta));
                    Ss[i * 32 + lane] = sv;
                    out = __fadd_rn(out, __fmul_rn(sv, q[i]));
                }
                oraw[(i64)t * vd + h * Dv + j] = out;
            }
            __syncwarp();
        }
    }
    __syncthreads();
    if (full) {
        for (int i = tid; i < Dk * 8; i += blockDim.x) {
            int r = i >> 3, c = (i & 7) * 4;
            *(float4*)(Sh + (i64)r * Dv + j0 + c) = *(const float4*)(Ss + r * 32 + c);
        }
    } else {
        for (int i = tid; i < Dk * 32; i += blockDim.x) {
            int r = i >> 5, c = i & 31;
            if (j0 + c < Dv) Sh[(i64)r * Dv + j0 + c] = Ss[i];
        }
    }
}

// gdn_rec_pipe is gdn_rec with the chain of token t's output and the chain
// of token t+1's k·S in one loop (the second reads the state as token t
// leaves it, element by element): the same sums in the same order, so
// bitwise gdn_rec, but two independent dependency chains a step instead of
// two chains one after the other. k is double-buffered in shared memory.
extern "C" __global__ void gdn_rec_pipe(float* oraw, float* S, const float* conv, const float* a, const float* b,
                                        const float* negExpA, const float* dtBias, int C, int Hk, int Hv, int Dk, int Dv, int T, int abStride) {
    PDL_ENTRY();
    extern __shared__ __align__(16) float smem[];
    float* Ss = smem;        // [Dk][32]
    float* q = Ss + Dk * 32; // [Dk]
    float* kb = q + Dk;      // [2][Dk]: token t's k in kb[t&1]
    float* tok = kb + 2 * Dk; // [T][4]: iq, ik, decay, beta
    float* qk = tok + 4 * T; // [GDN_STAGE_T][2·Dk] when T ≤ GDN_STAGE_T
    int h = blockIdx.x, j0 = blockIdx.y * 32, tid = threadIdx.x, lane = tid & 31;
    int ratio = Hv / Hk, kh = h / ratio;
    int kd = Hk * Dk, vd = Hv * Dv;
    float qScale = (float)(1.0 / sqrt((double)Dk));
    float* Sh = S + (i64)h * Dk * Dv;
    bool full = j0 + 32 <= Dv && (Dv & 3) == 0;
    if (full) { // 8 float4 a row of the slice
        for (int i = tid; i < Dk * 8; i += blockDim.x) {
            int r = i >> 3, c = (i & 7) * 4;
            *(float4*)(Ss + r * 32 + c) = *(const float4*)(Sh + (i64)r * Dv + j0 + c);
        }
    } else {
        for (int i = tid; i < Dk * 32; i += blockDim.x) {
            int r = i >> 5, c = i & 31;
            Ss[i] = j0 + c < Dv ? Sh[(i64)r * Dv + j0 + c] : 0.0f;
        }
    }
    bool staged = T <= GDN_STAGE_T;
    if (staged)
        for (int i = tid; i < T * 2 * Dk; i += blockDim.x) {
            int t = i / (2 * Dk), c = i % (2 * Dk);
            qk[i] = conv[(i64)t * C + (c < Dk ? kh * Dk + c : kd + kh * Dk + c - Dk)];
        }
    __syncthreads();
    for (int i = tid; i < 4 * T; i += blockDim.x) {
        int t = i >> 2, what = i & 3;
        if (what < 2) { // l2NormScaled's sum, index order, float64
            const float* src = staged ? qk + t * 2 * Dk + what * Dk : conv + (i64)t * C + what * kd + kh * Dk;
            double sq = 0;
#pragma unroll 8
            for (int c = 0; c < Dk; c++) sq += (double)src[c] * (double)src[c];
            tok[i] = (float)(1.0 / sqrt((double)__fadd_rn((float)sq, 1e-6f)));
        } else if (what == 2) {
            float g = __fmul_rn(negExpA[h], softplus64(__fadd_rn(a[t * abStride + h], dtBias[h])));
            tok[i] = exp64(g);
        } else {
            tok[i] = sigmoid64(b[t * abStride + h]);
        }
    }
    __syncthreads();
    if (tid < 32) {
        int j = j0 + lane, per = Dk / 32;
        bool col = j < Dv;
        float rq[4], rk[4], rv = 0; // raw q of token t+1, k of token t+2, v of token t+1, in flight
        // Prologue: token 0's q and k, token 1's k, token 0's v and p.
        {
            const float* r0 = conv;
            const float* r1 = conv + (T > 1 ? C : 0);
            float iq = tok[0], ik = tok[1], ik1 = T > 1 ? tok[5] : 0.0f;
#pragma unroll
            for (int m = 0; m < 4; m++)
                if (m < per) {
                    q[lane + 32 * m] = __fmul_rn(__fmul_rn(r0[kh * Dk + lane + 32 * m], iq), qScale);
                    kb[lane + 32 * m] = __fmul_rn(__fmul_rn(r0[kd + kh * Dk + lane + 32 * m], ik), 1.0f);
                    if (T > 1) kb[Dk + lane + 32 * m] = __fmul_rn(__fmul_rn(r1[kd + kh * Dk + lane + 32 * m], ik1), 1.0f);
                }
            if (col) rv = r0[2 * kd + h * Dv + j];
        }
        float vj = rv, p = 0;
        __syncwarp();
        if (col) {
            float decay = tok[2];
#pragma unroll 8
            for (int i = 0; i < Dk; i++) p = __fadd_rn(p, __fmul_rn(__fmul_rn(Ss[i * 32 + lane], decay), kb[i]));
        }
        for (int t = 0; t < T; t++) {
            // Loads for the end of this step, in flight during it.
            if (t + 1 < T) {
                const float* r1 = conv + (i64)(t + 1) * C;
#pragma unroll
                for (int m = 0; m < 4; m++)
                    if (m < per) rq[m] = r1[kh * Dk + lane + 32 * m];
                if (col) rv = r1[2 * kd + h * Dv + j];
            }
            if (t + 2 < T) {
                const float* r2 = conv + (i64)(t + 2) * C;
#pragma unroll
                for (int m = 0; m < 4; m++)
                    if (m < per) rk[m] = r2[kd + kh * Dk + lane + 32 * m];
            }
            float decay = tok[4 * t + 2], beta = tok[4 * t + 3];
            float dn = t + 1 < T ? tok[4 * (t + 1) + 2] : 0.0f;
            const float* kt = kb + (t & 1) * Dk;
            const float* kn = kb + ((t + 1) & 1) * Dk;
            if (col) {
                // Token t's update and output, and token t+1's p from the
                // updated state: two independent chains, each summed in
                // gdn_heads' order.
                float delta = __fmul_rn(__fsub_rn(vj, p), beta);
                float out = 0, pn = 0;
#pragma unroll 8
                for (int i = 0; i < Dk; i++) {
                    float sv = __fadd_rn(__fmul_rn(Ss[i * 32 + lane], decay), __fmul_rn(kt[i], delta));
                    Ss[i * 32 + lane] = sv;
                    out = __fadd_rn(out, __fmul_rn(sv, q[i]));
                    pn = __fadd_rn(pn, __fmul_rn(__fmul_rn(sv, dn), kn[i]));
                }
                oraw[(i64)t * vd + h * Dv + j] = out;
                p = pn;
            }
            __syncwarp();
            if (t + 1 < T) {
                float iq = tok[4 * (t + 1)];
#pragma unroll
                for (int m = 0; m < 4; m++)
                    if (m < per) q[lane + 32 * m] = __fmul_rn(__fmul_rn(rq[m], iq), qScale);
                vj = rv;
            }
            if (t + 2 < T) {
                float ik = tok[4 * (t + 2) + 1];
                float* kw = kb + (t & 1) * Dk;
#pragma unroll
                for (int m = 0; m < 4; m++)
                    if (m < per) kw[lane + 32 * m] = __fmul_rn(__fmul_rn(rk[m], ik), 1.0f);
            }
            __syncwarp();
        }
    }
    __syncthreads();
    if (full) {
        for (int i = tid; i < Dk * 8; i += blockDim.x) {
            int r = i >> 3, c = (i & 7) * 4;
            *(float4*)(Sh + (i64)r * Dv + j0 + c) = *(const float4*)(Ss + r * 32 + c);
        }
    } else {
        for (int i = tid; i < Dk * 32; i += blockDim.x) {
            int r = i >> 5, c = i & 31;
            if (j0 + c < Dv) Sh[(i64)r * Dv + j0 + c] = Ss[i];
        }
    }
}

// gdn_rec_par is gdn_rec_pipe with the state update spread over the
// block's four warps (warp w updates rows 32w … 32w+31 and leaves the
// output's and the next token's k·S terms in shared memory), then warp 0
// sums the output and warp 1 the next p, each in index order: the same
// products and sums as gdn_rec, so bitwise the same, with a quarter of the
// update on each warp. Needs Dk ≤ 128 (four warps of 32 rows) and the
// opted-in shared memory of GDNRecParShared.
extern "C" __global__ void gdn_rec_par(float* oraw, float* S, const float* conv, const float* a, const float* b,
                                       const float* negExpA, const float* dtBias, int C, int Hk, int Hv, int Dk, int Dv, int T, int abStride) {
    PDL_ENTRY();
    extern __shared__ __align__(16) float smem[];
    float* Ss = smem;        // [Dk][32]
    float* q = Ss + Dk * 32; // [Dk]
    float* kb = q + Dk;      // [2][Dk]: token t's k in kb[t&1]
    float* tok = kb + 2 * Dk; // [T][4]: iq, ik, decay, beta
    float* qk = tok + 4 * T; // [GDN_STAGE_T][2·Dk] when T ≤ GDN_STAGE_T
    float* tO = qk + (T <= GDN_STAGE_T ? T * 2 * Dk : 0); // [Dk][32]: sv·q, token t's output terms
    float* tP = tO + Dk * 32;                             // [Dk][32]: (sv·decay')·k', token t+1's k·S terms
    float* pcol = tP + Dk * 32;                           // [32]: p of the next token, by column
    int h = blockIdx.x, j0 = blockIdx.y * 32, tid = threadIdx.x, lane = tid & 31;
    int ratio = Hv / Hk, kh = h / ratio;
    int kd = Hk * Dk, vd = Hv * Dv;
    float qScale = (float)(1.0 / sqrt((double)Dk));
    float* Sh = S + (i64)h * Dk * Dv;
    bool full = j0 + 32 <= Dv && (Dv & 3) == 0;
    if (full) { // 8 float4 a row of the slice
        for (int i = tid; i < Dk * 8; i += blockDim.x) {
            int r = i >> 3, c = (i & 7) * 4;
            *(float4*)(Ss + r * 32 + c) = *(const float4*)(Sh + (i64)r * Dv + j0 + c);
        }
    } else {
        for (int i = tid; i < Dk * 32; i += blockDim.x) {
            int r = i >> 5, c = i & 31;
            Ss[i] = j0 + c < Dv ? Sh[(i64)r * Dv + j0 + c] : 0.0f;
        }
    }
    bool staged = T <= GDN_STAGE_T;
    if (staged)
        for (int i = tid; i < T * 2 * Dk; i += blockDim.x) {
            int t = i / (2 * Dk), c = i % (2 * Dk);
            qk[i] = conv[(i64)t * C + (c < Dk ? kh * Dk + c : kd + kh * Dk + c - Dk)];
        }
    __syncthreads();
    for (int i = tid; i < 4 * T; i += blockDim.x) {
        int t = i >> 2, what = i & 3;
        if (what < 2) { // l2NormScaled's sum, index order, float64
            const float* src = staged ? qk + t * 2 * Dk + what * Dk : conv + (i64)t * C + what * kd + kh * Dk;
            double sq = 0;
#pragma unroll 8
            for (int c = 0; c < Dk; c++) sq += (double)src[c] * (double)src[c];
            tok[i] = (float)(1.0 / sqrt((double)__fadd_rn((float)sq, 1e-6f)));
        } else if (what == 2) {
            float g = __fmul_rn(negExpA[h], softplus64(__fadd_rn(a[t * abStride + h], dtBias[h])));
            tok[i] = exp64(g);
        } else {
            tok[i] = sigmoid64(b[t * abStride + h]);
        }
    }
    __syncthreads();
    const int w = tid >> 5, j = j0 + lane;
    const bool col = j < Dv;
    // Token 0's q and k and token 1's k, one element a thread.
    for (int e = tid; e < Dk; e += blockDim.x) {
        q[e] = __fmul_rn(__fmul_rn(conv[kh * Dk + e], tok[0]), qScale);
        kb[e] = __fmul_rn(__fmul_rn(conv[kd + kh * Dk + e], tok[1]), 1.0f);
        if (T > 1) kb[Dk + e] = __fmul_rn(__fmul_rn(conv[C + kd + kh * Dk + e], tok[5]), 1.0f);
    }
    __syncthreads();
    if (w == 0 && col) { // token 0's p, from the state as it came in
        float decay = tok[2], p = 0;
#pragma unroll 8
        for (int i = 0; i < Dk; i++) p = __fadd_rn(p, __fmul_rn(__fmul_rn(Ss[i * 32 + lane], decay), kb[i]));
        pcol[lane] = p;
    }
    float vj = col ? conv[2 * kd + h * Dv + j] : 0.0f, rv = 0;
    float rq[2], rk[2]; // warps 2 and 3: raw q of token t+1, k of token t+2 (elements tid−64, tid)
    for (int t = 0; t < T; t++) {
        if (t + 1 < T && col) rv = conv[(i64)(t + 1) * C + 2 * kd + h * Dv + j];
        if (w >= 2) {
#pragma unroll
            for (int m = 0; m < 2; m++) {
                int e = tid - 64 + 64 * m;
                if (e < Dk) {
                    if (t + 1 < T) rq[m] = conv[(i64)(t + 1) * C + kh * Dk + e];
                    if (t + 2 < T) rk[m] = conv[(i64)(t + 2) * C + kd + kh * Dk + e];
                }
            }
        }
        __syncthreads(); // q, kb and pcol hold token t's
        float decay = tok[4 * t + 2], beta = tok[4 * t + 3];
        float dn = t + 1 < T ? tok[4 * (t + 1) + 2] : 0.0f;
        const float* kt = kb + (t & 1) * Dk;
        const float* kn = kb + ((t + 1) & 1) * Dk;
        if (col && 32 * w < Dk) {
            // Every element's update is independent: warp w takes rows
            // 32w … 32w+31 and leaves the two sums' terms in shared memory.
            float delta = __fmul_rn(__fsub_rn(vj, pcol[lane]), beta);
#pragma unroll 8
            for (int r = 0; r < 32; r++) {
                int i = 32 * w + r;
                float sv = __fadd_rn(__fmul_rn(Ss[i * 32 + lane], decay), __fmul_rn(kt[i], delta));
                Ss[i * 32 + lane] = sv;
                tO[i * 32 + lane] = __fmul_rn(sv, q[i]);
                tP[i * 32 + lane] = __fmul_rn(__fmul_rn(sv, dn), kn[i]);
            }
        }
        __syncthreads(); // the terms are in; q and kb[t&1] are free
        if (w == 0 && col) { // token t's output, summed in index order
            float out = 0;
#pragma unroll 8
            for (int i = 0; i < Dk; i++) out = __fadd_rn(out, tO[i * 32 + lane]);
            oraw[(i64)t * vd + h * Dv + j] = out;
        } else if (w == 1 && col) { // token t+1's p, summed in index order
            float pn = 0;
#pragma unroll 8
            for (int i = 0; i < Dk; i++) pn = __fadd_rn(pn, tP[i * 32 + lane]);
            pcol[lane] = pn;
        } else if (w >= 2) {
#pragma unroll
            for (int m = 0; m < 2; m++) {
                int e = tid - 64 + 64 * m;
                if (e < Dk) {
                    if (t + 1 < T) q[e] = __fmul_rn(__fmul_rn(rq[m], tok[4 * (t + 1)]), qScale);
                    if (t + 2 < T) kb[(t & 1) * Dk + e] = __fmul_rn(__fmul_rn(rk[m], tok[4 * (t + 2) + 1]), 1.0f);
                }
            }
        }
        vj = rv;
    }
    __syncthreads();
    if (full) {
        for (int i = tid; i < Dk * 8; i += blockDim.x) {
            int r = i >> 3, c = (i & 7) * 4;
            *(float4*)(Sh + (i64)r * Dv + j0 + c) = *(const float4*)(Ss + r * 32 + c);
        }
    } else {
        for (int i = tid; i < Dk * 32; i += blockDim.x) {
            int r = i >> 5, c = i & 31;
            if (j0 + c < Dv) Sh[(i64)r * Dv + j0 + c] = Ss[i];
        }
    }
}

// Named barriers for gdn_rec_reg's hand-offs between warps: arrive (the
// producer, no wait) and sync (the consumer) on barrier id, n threads in
// all; memory written before the arrive is visible after the sync. The
// forms without .aligned, so a warp need not have reconverged (the asm is
// opaque to the compiler).
#if defined(NVMAI_EMU)
__device__ __forceinline__ void nbar_sync(int id, int n) { emu_bar_sync(id, n); }
__device__ __forceinline__ void nbar_arrive(int id, int n) { emu_bar_arrive(id, n); }
#else
__device__ __forceinline__ void nbar_sync(int id, int n) { asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void nbar_arrive(int id, int n) { asm volatile("barrier.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }
#endif

// gdn_rec_reg is gdn_rec_par with the state in registers: warp w keeps rows
// 32w … 32w+31 of its block's 32 columns (one column a lane) and updates
// them; the output's and the next token's k·S sums run down the warps in
// index order, warp w adding its 32 rows' terms to what warp w−1 handed it
// (named barriers, no __syncthreads in the token loop), and the last warp
// turns the next p into the next delta and hands it to every warp. The
// same products and the same sums in the same order as gdn_rec, so bitwise
// the same; no state traffic through shared memory, and each warp stages
// its own rows of q and k (one coalesced load a token each). Warps past
// Dk/32 leave after the per-token scalars. Needs Dk a multiple of 32, ≤ 128.
__device__ __forceinline__ void gdn_rec_reg_body(float* oraw, float* S, const float* conv, const float* a, const float* b,
                                                              const float* negExpA, const float* dtBias, int C, int Hk, int Hv, int Dk, int Dv, int T, int abStride) {
    PDL_ENTRY();
    extern __shared__ __align__(16) float smem[];
    float* tok = smem;                                    // [T][4]: iq, ik, decay, beta
    float* qk = tok + 4 * T;                              // [GDN_STAGE_T][2·Dk] when T ≤ GDN_STAGE_T
    float* wbuf = qk + (T <= GDN_STAGE_T ? T * 2 * Dk : 0); // [4][96]: a warp's rows of q, k[2]
    float* xo = wbuf + 4 * 96;                            // [4][32]: output partial sums, by warp and column
    float* xp = xo + 4 * 32;                              // [4][32]: next p partial sums
    float* dl = xp + 4 * 32;                              // [32]: the token's delta, by column
    int h = blockIdx.x, j0 = blockIdx.y * 32, tid = threadIdx.x, lane = tid & 31;
    int ratio = Hv / Hk, kh = h / ratio;
    int kd = Hk * Dk, vd = Hv * Dv;
    float qScale = (float)(1.0 / sqrt((double)Dk));
    float* Sh = S + (i64)h * Dk * Dv;
    bool staged = T <= GDN_STAGE_T;
    if (staged)
        for (int i = tid; i < T * 2 * Dk; i += blockDim.x) {
            int t = i / (2 * Dk), c = i % (2 * Dk);
            qk[i] = conv[(i64)t * C + (c < Dk ? kh * Dk + c : kd + kh * Dk + c - Dk)];
        }
    __syncthreads();
    for (int i = tid; i < 4 * T; i += blockDim.x) {
        int t = i >> 2, what = i & 3;
        if (what < 2) { // l2NormScaled's sum, index order, float64
            const float* src = staged ? qk + t * 2 * Dk + what * Dk : conv + (i64)t * C + what * kd + kh * Dk;
            double sq = 0;
#pragma unroll 8
            for (int c = 0; c < Dk; c++) sq += (double)src[c] * (double)src[c];
            tok[i] = (float)(1.0 / sqrt((double)__fadd_rn((float)sq, 1e-6f)));
        } else if (what == 2) {
            float g = __fmul_rn(negExpA[h], softplus64(__fadd_rn(a[t * abStride + h], dtBias[h])));
            tok[i] = exp64(g);
        } else {
            tok[i] = sigmoid64(b[t * abStride + h]);
        }
    }
    __syncthreads();
    const int w = tid >> 5, nw = Dk >> 5, j = j0 + lane;
    if (w >= nw) return; // no __syncthreads below: the hand-offs count nw warps
    const bool col = j < Dv, last = w == nw - 1;
    const int bc = 32 * nw; // the delta hand-off's threads
    const int row0 = 32 * w;
    float st[32];
#pragma unroll
    for (int r = 0; r < 32; r++) st[r] = col ? Sh[(i64)(row0 + r) * Dv + j] : 0.0f;
    float* wq = wbuf + w * 96; // [32]: token t's q, the warp's rows
    float* wk = wq + 32;       // [2][32]: token t's k in wk[(t&1)·32]
    const float* rowq = conv + kh * Dk + row0 + lane;
    const float* rowk = conv + kd + kh * Dk + row0 + lane;
    const float* colv = conv + 2 * kd + h * Dv + (col ? j : 0);
    wq[lane] = __fmul_rn(__fmul_rn(rowq[0], tok[0]), qScale);
    wk[lane] = __fmul_rn(__fmul_rn(rowk[0], tok[1]), 1.0f);
    if (T > 1) wk[32 + lane] = __fmul_rn(__fmul_rn(rowk[C], tok[5]), 1.0f);
    __syncwarp();
    float delta;
    { // token 0's p from the state as it came in, then its delta
        float decay = tok[2], tp[32];
#pragma unroll
        for (int r = 0; r < 32; r += 4) {
            float4 k4 = *(const float4*)(wk + r);
            tp[r] = __fmul_rn(__fmul_rn(st[r], decay), k4.x);
            tp[r + 1] = __fmul_rn(__fmul_rn(st[r + 1], decay), k4.y);
            tp[r + 2] = __fmul_rn(__fmul_rn(st[r + 2], decay), k4.z);
            tp[r + 3] = __fmul_rn(__fmul_rn(st[r + 3], decay), k4.w);
        }
        float p = 0;
        if (w > 0) {
            nbar_sync(w, 64);
            p = xp[(w - 1) * 32 + lane];
        }
#pragma unroll
        for (int r = 0; r < 32; r++) p = __fadd_rn(p, tp[r]);
        if (!last) {
            xp[w * 32 + lane] = p;
            nbar_arrive(w + 1, 64);
            nbar_sync(nw + 1, bc);
            delta = dl[lane];
        } else {
            delta = __fmul_rn(__fsub_rn(col ? colv[0] : 0.0f, p), tok[3]);
            if (nw > 1) {
                dl[lane] = delta;
                nbar_arrive(nw + 1, bc);
            }
        }
    }
    float vn = 0; // the last warp: v of token t+1
    for (int t = 0; t < T; t++) {
        // In flight during the step: token t+1's q and token t+2's k (the
        // warp's rows), token t+1's v (the last warp).
        float rq = 0, rk = 0;
        if (t + 1 < T) rq = rowq[(i64)(t + 1) * C];
        if (t + 2 < T) rk = rowk[(i64)(t + 2) * C];
        if (last && t + 1 < T && col) vn = colv[(i64)(t + 1) * C];
        float decay = tok[4 * t + 2];
        float dn = t + 1 < T ? tok[4 * (t + 1) + 2] : 0.0f;
        const float* kt = wk + (t & 1) * 32;
        const float* kn = wk + ((t + 1) & 1) * 32;
        float o = 0, p = 0;
        if (w == 0) { // first in the chain: the sums as the terms come
#pragma unroll
            for (int r = 0; r < 32; r += 4) {
                float4 k4 = *(const float4*)(kt + r), q4 = *(const float4*)(wq + r), n4 = *(const float4*)(kn + r);
                float kr[4] = {k4.x, k4.y, k4.z, k4.w}, qr[4] = {q4.x, q4.y, q4.z, q4.w}, nr[4] = {n4.x, n4.y, n4.z, n4.w};
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    float sv = __fadd_rn(__fmul_rn(st[r + u], decay), __fmul_rn(kr[u], delta));
                    st[r + u] = sv;
                    o = __fadd_rn(o, __fmul_rn(sv, qr[u]));
                    p = __fadd_rn(p, __fmul_rn(__fmul_rn(sv, dn), nr[u]));
                }
            }
        } else { // the terms while the warps before add theirs
            float to[32], tp[32];
#pragma unroll
            for (int r = 0; r < 32; r += 4) {
                float4 k4 = *(const float4*)(kt + r), q4 = *(const float4*)(wq + r), n4 = *(const float4*)(kn + r);
                float kr[4] = {k4.x, k4.y, k4.z, k4.w}, qr[4] = {q4.x, q4.y, q4.z, q4.w}, nr[4] = {n4.x, n4.y, n4.z, n4.w};
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    float sv = __fadd_rn(__fmul_rn(st[r + u], decay), __fmul_rn(kr[u], delta));
                    st[r + u] = sv;
                    to[r + u] = __fmul_rn(sv, qr[u]);
                    tp[r + u] = __fmul_rn(__fmul_rn(sv, dn), nr[u]);
                }
            }
            nbar_sync(w, 64);
            o = xo[(w - 1) * 32 + lane];
            p = xp[(w - 1) * 32 + lane];
#pragma unroll
            for (int r = 0; r < 32; r++) {
                o = __fadd_rn(o, to[r]);
                p = __fadd_rn(p, tp[r]);
            }
        }
        if (!last) {
            xo[w * 32 + lane] = o;
            xp[w * 32 + lane] = p;
            nbar_arrive(w + 1, 64);
        } else {
            if (col) oraw[(i64)t * vd + h * Dv + j] = o;
            if (t + 1 < T) {
                delta = __fmul_rn(__fsub_rn(vn, p), tok[4 * (t + 1) + 3]);
                if (nw > 1) {
                    dl[lane] = delta;
                    nbar_arrive(nw + 1, bc);
                }
            }
        }
        // The warp's rows of token t+1's q and token t+2's k (k of t+2
        // takes token t's slot).
        __syncwarp();
        if (t + 1 < T) wq[lane] = __fmul_rn(__fmul_rn(rq, tok[4 * (t + 1)]), qScale);
        if (t + 2 < T) wk[(t & 1) * 32 + lane] = __fmul_rn(__fmul_rn(rk, tok[4 * (t + 2) + 1]), 1.0f);
        __syncwarp();
        if (!last && t + 1 < T) {
            nbar_sync(nw + 1, bc);
            delta = dl[lane];
        }
    }
#pragma unroll
    for (int r = 0; r < 32; r++)
        if (col) Sh[(i64)(row0 + r) * Dv + j] = st[r];
}

extern "C" __global__ void __launch_bounds__(128) gdn_rec_reg(float* oraw, float* S, const float* conv, const float* a, const float* b,
                                                              const float* negExpA, const float* dtBias, int C, int Hk, int Hv, int Dk, int Dv, int T, int abStride) {
    gdn_rec_reg_body(oraw, S, conv, a, b, negExpA, dtBias, C, Hk, Hv, Dk, Dv, T, abStride);
}

// The batched decode step's mixers (pkg/gpu batch.go): one token of each
// of up to ROWS_MAX sequences in one launch, row r (blockIdx.z) reading row
// r of the batch's buffers and updating its own sequence's state, whose
// pointer comes by value in RowPtrs. Each row runs the one-token launch's
// code on the same values, so it is bitwise that launch.
#define ROWS_MAX 16
struct RowPtrs {
    unsigned long long p[ROWS_MAX];
};

// gdn_rec_reg_rows is gdn_rec_reg with T = 1 for each row: oraw [N, Hv·Dv],
// conv [N, C], a and b rows abStride apart, S.p[r] row r's state.
extern "C" __global__ void __launch_bounds__(128) gdn_rec_reg_rows(float* oraw, RowPtrs S, const float* conv, const float* a, const float* b,
                                                                   const float* negExpA, const float* dtBias, int C, int Hk, int Hv, int Dk, int Dv, int abStride) {
    i64 r = blockIdx.z;
    gdn_rec_reg_body(oraw + r * Hv * Dv, (float*)S.p[r], conv + r * C, a + r * abStride, b + r * abStride, negExpA, dtBias, C, Hk, Hv, Dk, Dv, 1, abStride);
}

// gdn_conv_rows is gdn_conv with T = 1 for each row: proj and out [N, C],
// state.p[r] row r's conv state.
extern "C" __global__ void gdn_conv_rows(float* out, const float* proj, RowPtrs state, const float* w, int C, int K) {
    PDL_ENTRY();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    i64 r = blockIdx.z;
    float* st = (float*)state.p[r];
    if (K == 4) conv_run<4>(out + r * C, proj + r * C, st, w, C, K, 1, c);
    else conv_run<0>(out + r * C, proj + r * C, st, w, C, K, 1, c);
}

// gdn_norm is gdn_heads' gated RMSNorm (qwen35 gatedNorm) of one head and
// token (block (h, t)): the invRMS sum in float64, index order, by one
// thread, then o = normW·(ov·inv)·silu(z). When xq8 is set (a head is
// whole groups of 64) the head's groups are quantized in the same launch.
extern "C" __global__ void gdn_norm(float* o, const float* oraw, const float* z, const float* normW, int Hv, int Dv, float eps,
                                    signed char* xq8, int* xq4, float* dx, float* sx) {
    PDL_ENTRY();
    extern __shared__ float ov[]; // [Dv]
    __shared__ float inv;
    __shared__ float vs[32][64];
    __shared__ signed char qs[32][64];
    int h = blockIdx.x, t = blockIdx.y, vd = Hv * Dv;
    i64 base = (i64)t * vd + (i64)h * Dv;
    for (int i = threadIdx.x; i < Dv; i += blockDim.x) ov[i] = oraw[base + i];
    __syncthreads();
    if (threadIdx.x == 0) {
        double ss = 0;
        for (int i = 0; i < Dv; i++) ss += (double)ov[i] * (double)ov[i];
        float mean = (float)(ss / (double)Dv);
        inv = (float)(1.0 / sqrt((double)__fadd_rn(mean, eps)));
    }
    __syncthreads();
    for (int i = threadIdx.x; i < Dv; i += blockDim.x) {
        float zz = z[base + i];
        float sz = __fmul_rn(zz, sigk(zz));
        float v = __fmul_rn(__fmul_rn(normW[i], __fmul_rn(ov[i], inv)), sz);
        o[base + i] = v;
        ov[i] = v;
    }
    __syncthreads();
    if (xq8) {
        int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
        for (int g = w; g < Dv / 64; g += blockDim.x >> 5)
            quant_warp(ov[g * 64 + lane], ov[g * 64 + lane + 32], base / 64 + g, lane, vs[w], qs[w], xq8, xq4, dx, sx);
    }
}

// ---------------------------------------------------------------------------
// Gated attention.

#define ATT_B 32       // cached values a thread loads before adding them
#define ATT_SMEM 10240 // positions whose softmax weights attn_values keeps in shared memory

// norm_rotate: rmsNorm with scale over a head of Dh (sum of squares in
// float64, a block tree), then rotate-half RoPE on the first 2·half dims
// (qwen35 rmsNorm + rotate), by the whole block. dst must not alias x.
__device__ void norm_rotate(float* dst, const float* x, const float* scale, int Dh, float eps, const float* invFreq, int half, int pos, double* sh) {
    double ss = 0;
    for (int i = threadIdx.x; i < Dh; i += blockDim.x) ss += (double)x[i] * (double)x[i];
    ss = block_sum_d(ss, sh);
    float mean = (float)(ss / (double)Dh);
    float inv = (float)(1.0 / sqrt((double)__fadd_rn(mean, eps)));
    for (int i = threadIdx.x; i < Dh; i += blockDim.x) dst[i] = __fmul_rn(__fmul_rn(x[i], inv), scale[i]);
    __syncthreads();
    for (int jj = threadIdx.x; jj < half; jj += blockDim.x) {
        float angle = __fmul_rn((float)pos, invFreq[jj]);
        float c = (float)cos((double)angle), s = (float)sin((double)angle);
        float x0 = dst[jj], x1 = dst[jj + half];
        dst[jj] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        dst[jj + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    }
    __syncthreads();
}

// attn_kv: normalise and rotate the chunk's keys into the cache and copy its
// values; kv [T, Hkv·Dh]; caches [cap, Hkv·Dh]; positions start at *pos.
extern "C" __global__ void attn_kv(float* kc, float* vc, const float* k, const float* v, const float* kNorm,
                                   const float* invFreq, const int* pos, int Hkv, int Dh, int half, float eps, int T) {
    PDL_ENTRY();
    __shared__ double sh[32];
    int g = blockIdx.x, t = blockIdx.y;
    int kvd = Hkv * Dh;
    int p = *pos + t;
    norm_rotate(kc + (i64)p * kvd + g * Dh, k + (i64)t * kvd + g * Dh, kNorm, Dh, eps, invFreq, half, p, sh);
    for (int i = threadIdx.x; i < Dh; i += blockDim.x) vc[(i64)p * kvd + g * Dh + i] = v[(i64)t * kvd + g * Dh + i];
}

// attn_scores: per query head, token and slice z of the positions, the
// normed rotated query and its scores over the cache up to the token
// (kernels.AttendScores: four lanes, (l0+l1)+(l2+l3), a quad of threads a
// position). q2 [T, Hq·2·Dh] (per head query then gate); scores [T, Hq, cap].
extern "C" __global__ void attn_scores(float* scores, const float* q2, const float* kc, const float* qNorm, const float* invFreq,
                                       const int* pos, int Hq, int Hkv, int Dh, int half, float eps, int cap) {
    PDL_ENTRY();
    extern __shared__ float qs[]; // [Dh]
    __shared__ double sh[32];
    int h = blockIdx.x, t = blockIdx.y, z = blockIdx.z, Z = gridDim.z;
    int group = Hq / Hkv, g = h / group, kvd = Hkv * Dh;
    int p = *pos + t, n = p + 1;
    float scale = (float)(1.0 / sqrt((double)Dh));
    const float* qsrc = q2 + (i64)t * 2 * Hq * Dh + (i64)h * 2 * Dh;
    norm_rotate(qs, qsrc, qNorm, Dh, eps, invFreq, half, p, sh);
    float* sc = scores + ((i64)t * Hq + h) * cap;
    int quad = threadIdx.x >> 2, l = threadIdx.x & 3, nq = blockDim.x >> 2;
    for (int s0 = z * nq; s0 < n; s0 += nq * Z) {
        int s = s0 + quad;
        float acc = 0;
        if (s < n) {
            const float* kr = kc + (i64)s * kvd + g * Dh;
            int i = 0;
            for (; i + 4 * ATT_B <= Dh; i += 4 * ATT_B) {
                float kv[ATT_B];
#pragma unroll
                for (int k = 0; k < ATT_B; k++) kv[k] = kr[i + 4 * k + l];
#pragma unroll
                for (int k = 0; k < ATT_B; k++) acc = __fadd_rn(acc, __fmul_rn(qs[i + 4 * k + l], kv[k]));
            }
            for (; i + 4 <= Dh; i += 4) acc = __fadd_rn(acc, __fmul_rn(qs[i + l], kr[i + l]));
            if (l == 0)
                for (; i < Dh; i++) acc = __fadd_rn(acc, __fmul_rn(qs[i], kr[i]));
        }
        acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 1, 4));
        acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 2, 4));
        if (l == 0 && s < n) sc[s] = __fmul_rn(acc, scale);
    }
}

// att_softmax_of is the softmax of attn_values and attn_values_w over a
// row's n scores: their maximum mx (a block reduction) and inv, 1 over the
// float64 sum of kernels.Exp(score − mx).
__device__ __forceinline__ void att_softmax_of(const float* sc, int n, float* red, double* sh, float& mx, float& inv) {
    mx = -__int_as_float(0x7f800000);
    for (int s = threadIdx.x; s < n; s += blockDim.x) mx = fmaxf(mx, sc[s]);
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
        float mm = red[0];
        for (int w = 1; w < (int)((blockDim.x + 31) >> 5); w++) mm = fmaxf(mm, red[w]);
        red[0] = mm;
    }
    __syncthreads();
    mx = red[0];
    double sum = 0;
    for (int s = threadIdx.x; s < n; s += blockDim.x) sum += (double)exp32k(__fsub_rn(sc[s], mx));
    sum = block_sum_d(sum, sh);
    inv = (float)(1.0 / sum);
}

// attn_values: per query head, token and slice of head dims, the softmax of
// the scores (kernels.Exp after the maximum, a float64 denominator; every
// block recomputes it) and the weighted values (kernels.AttendValues:
// ascending positions from zero), times the sigmoid gate.
extern "C" __global__ void attn_values(float* o, const float* scores, const float* q2, const float* vc, const int* pos,
                                       int Hq, int Hkv, int Dh, int cap) {
    PDL_ENTRY();
    __shared__ double sh[32];
    __shared__ float wsm[ATT_SMEM];
    __shared__ float red[32];
    int h = blockIdx.x, t = blockIdx.y;
    int group = Hq / Hkv, g = h / group, kvd = Hkv * Dh;
    int n = *pos + t + 1;
    const float* sc = scores + ((i64)t * Hq + h) * cap;
    float mx, inv;
    att_softmax_of(sc, n, red, sh, mx, inv);
    const float* gate = q2 + (i64)t * 2 * Hq * Dh + (i64)h * 2 * Dh + Dh;
    int i = blockIdx.z * blockDim.x + threadIdx.x;
    if (n <= ATT_SMEM) { // the weights once, then the in-order sums read them from shared memory
        for (int s = threadIdx.x; s < n; s += blockDim.x) wsm[s] = __fmul_rn(exp32k(__fsub_rn(sc[s], mx)), inv);
        __syncthreads();
        if (i >= Dh) return;
        float acc = 0;
        const float* vcol = vc + g * Dh + i;
        int s = 0;
        for (; s + ATT_B <= n; s += ATT_B) {
            float vv[ATT_B];
#pragma unroll
            for (int k = 0; k < ATT_B; k++) vv[k] = vcol[(i64)(s + k) * kvd];
#pragma unroll
            for (int k = 0; k < ATT_B; k++) acc = __fadd_rn(acc, __fmul_rn(wsm[s + k], vv[k]));
        }
        for (; s < n; s++) acc = __fadd_rn(acc, __fmul_rn(wsm[s], vcol[(i64)s * kvd]));
        o[(i64)t * Hq * Dh + h * Dh + i] = __fmul_rn(acc, sigk(gate[i]));
        return;
    }
    if (i >= Dh) return;
    float acc = 0;
    const float* vcol = vc + g * Dh + i;
    int s = 0;
    for (; s + ATT_B <= n; s += ATT_B) {
        float vv[ATT_B], ww[ATT_B];
#pragma unroll
        for (int k = 0; k < ATT_B; k++) {
            vv[k] = vcol[(i64)(s + k) * kvd];
            ww[k] = sc[s + k];
        }
#pragma unroll
        for (int k = 0; k < ATT_B; k++) acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(exp32k(__fsub_rn(ww[k], mx)), inv), vv[k]));
    }
    for (; s < n; s++) acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(exp32k(__fsub_rn(sc[s], mx)), inv), vcol[(i64)s * kvd]));
    o[(i64)t * Hq * Dh + h * Dh + i] = __fmul_rn(acc, sigk(gate[i]));
}

// The KV cache below float32 (--kv-bits 8 and 16, docs/kv-cache.md), as
// pkg/models/blocks.KVCache stores a row of Hkv·Dh values per token: int8
// with one float32 scale per group of `group` values (64, or the whole
// head), the scales of a row in their own array [cap, Hkv·Dh/group]; or
// bfloat16. attn_kv_*, attn_scores_* and attn_values_* are attn_kv,
// attn_scores and attn_values (above, the float32 cache, unchanged) with
// the cache written and read at that width.
#define KV_F32 0
#define KV_Q8 1
#define KV_BF16 2

// kv_at is value col of cached row `row`, widened as kernels.widenQ8 and
// widenBF16 widen it: float32(q)·scale, one rounded multiply; bfloat16 is
// exact. The attention kernels read every cached value through it, so over
// a narrow cache they compute what they compute over the widened float32
// rows, bit for bit.
// kv_rows is a cache row's geometry: kvd values, gpr scale groups of
// `group` values (shift: log2(group) when a power of two, else −1, so the
// common group of 64 costs a shift, not a division).
struct kv_rows {
    int kvd, gpr, group, shift;
};

__device__ __forceinline__ kv_rows kv_rows_of(int kvd, int group) {
    kv_rows r = {kvd, kvd / group, group, (group & (group - 1)) == 0 ? __ffs(group) - 1 : -1};
    return r;
}

template <int W>
__device__ __forceinline__ float kv_at(const void* c, const float* sc, i64 row, int col, const kv_rows& r) {
    if (W == KV_F32) return ((const float*)c)[row * r.kvd + col];
    if (W == KV_Q8) {
        int gi = r.shift >= 0 ? col >> r.shift : col / r.group;
        return __fmul_rn((float)((const signed char*)c)[row * r.kvd + col], sc[row * r.gpr + gi]);
    }
    return bf16f(((const u16*)c)[row * r.kvd + col]);
}

// nanmax is Go's max on float32: a NaN on either side gives a NaN.
__device__ __forceinline__ float nanmax(float a, float b) {
    return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
}

// kv_put stores x [Dh] (a head of one token) as cached row `row`, columns
// col… (a multiple of group), by the whole block: kernels.ToBF16 (to
// nearest even, a NaN kept quiet) or kernels.QuantizeQ8 (scale =
// max|x|/127 over the group in float32, q = x·(1/scale) in float64 rounded
// half away from zero, clamped to ±127; a zero, infinite or NaN scale
// stores zeros), a warp a group. x is the block's own (shared) memory or
// global memory it only reads.
template <int W>
__device__ void kv_put(void* c, float* sc, const float* x, i64 row, int col, int Dh, int kvd, int group) {
    if (W == KV_BF16) {
        for (int i = threadIdx.x; i < Dh; i += blockDim.x) {
            float v = x[i];
            u32 b = __float_as_uint(v);
            u16 h = (v != v) ? (u16)((b >> 16) | 0x40u) : (u16)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
            ((u16*)c)[row * kvd + col + i] = h;
        }
        return;
    }
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    signed char* q = (signed char*)c + row * kvd + col;
    for (int gi = w; gi < Dh / group; gi += warps) {
        const float* xs = x + gi * group;
        float amax = 0;
        for (int i = lane; i < group; i += 32) amax = nanmax(amax, fabsf(xs[i]));
        for (int off = 16; off > 0; off >>= 1) amax = nanmax(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        float s = __fdiv_rn(amax, 127.0f);
        if (lane == 0) sc[row * (kvd / group) + (col + gi * group) / group] = s;
        bool zero = s == 0 || s != s || isinf(s);
        double inv = zero ? 0 : __ddiv_rn(1.0, (double)s);
        for (int i = lane; i < group; i += 32) {
            signed char r = 0;
            if (!zero) r = (signed char)(int)fmin(127.0, fmax(-127.0, round(__dmul_rn((double)xs[i], inv))));
            q[gi * group + i] = r;
        }
    }
}

// attn_kv_w is attn_kv at width W (and, for int8, the scales ks, vs): the
// key is normed and rotated into shared memory [Dh] first, then stored as
// the CPU engine stores the float32 row (blocks.KVCache.PutKV).
template <int W>
__device__ void attn_kv_w(void* kc, void* vc, float* ks, float* vs, const float* k, const float* v, const float* kNorm,
                          const float* invFreq, const int* pos, int Hkv, int Dh, int half, float eps, int group, float* krow, int t) {
    __shared__ double sh[32];
    int g = blockIdx.x;
    int kvd = Hkv * Dh;
    int p = *pos + t;
    norm_rotate(krow, k + (i64)t * kvd + g * Dh, kNorm, Dh, eps, invFreq, half, p, sh);
    kv_put<W>(kc, ks, krow, p, g * Dh, Dh, kvd, group);
    kv_put<W>(vc, vs, v + (i64)t * kvd + g * Dh, p, g * Dh, Dh, kvd, group);
}

extern "C" __global__ void attn_kv_q8(signed char* kc, signed char* vc, float* ks, float* vs, const float* k, const float* v,
                                      const float* kNorm, const float* invFreq, const int* pos, int Hkv, int Dh, int half, float eps,
                                      int group, int T) {
    PDL_ENTRY();
    extern __shared__ float krow[]; // [Dh]
    attn_kv_w<KV_Q8>(kc, vc, ks, vs, k, v, kNorm, invFreq, pos, Hkv, Dh, half, eps, group, krow, blockIdx.y);
}

extern "C" __global__ void attn_kv_bf16(u16* kc, u16* vc, const float* k, const float* v, const float* kNorm,
                                        const float* invFreq, const int* pos, int Hkv, int Dh, int half, float eps, int T) {
    PDL_ENTRY();
    extern __shared__ float krow[]; // [Dh]
    attn_kv_w<KV_BF16>(kc, vc, 0, 0, k, v, kNorm, invFreq, pos, Hkv, Dh, half, eps, Dh, krow, blockIdx.y);
}

// attn_scores_w is attn_scores with the cache read at width W (kv_at).
template <int W>
__device__ void attn_scores_w(float* scores, const float* q2, const void* kc, const float* ks, const float* qNorm, const float* invFreq,
                              const int* pos, int Hq, int Hkv, int Dh, int half, float eps, int cap, int group, int t) {
    extern __shared__ float qs[]; // [Dh]
    __shared__ double sh[32];
    int h = blockIdx.x, z = blockIdx.z, Z = gridDim.z;
    int hg = Hq / Hkv, g = h / hg, kvd = Hkv * Dh;
    int p = *pos + t, n = p + 1;
    float scale = (float)(1.0 / sqrt((double)Dh));
    const float* qsrc = q2 + (i64)t * 2 * Hq * Dh + (i64)h * 2 * Dh;
    norm_rotate(qs, qsrc, qNorm, Dh, eps, invFreq, half, p, sh);
    float* sc = scores + ((i64)t * Hq + h) * cap;
    int quad = threadIdx.x >> 2, l = threadIdx.x & 3, nq = blockDim.x >> 2;
    int c0 = g * Dh;
    kv_rows kr = kv_rows_of(kvd, group);
    for (int s0 = z * nq; s0 < n; s0 += nq * Z) {
        int s = s0 + quad;
        float acc = 0;
        if (s < n) {
            int i = 0;
            for (; i + 4 * ATT_B <= Dh; i += 4 * ATT_B) {
                float kv[ATT_B];
#pragma unroll
                for (int k = 0; k < ATT_B; k++) kv[k] = kv_at<W>(kc, ks, s, c0 + i + 4 * k + l, kr);
#pragma unroll
                for (int k = 0; k < ATT_B; k++) acc = __fadd_rn(acc, __fmul_rn(qs[i + 4 * k + l], kv[k]));
            }
            for (; i + 4 <= Dh; i += 4) acc = __fadd_rn(acc, __fmul_rn(qs[i + l], kv_at<W>(kc, ks, s, c0 + i + l, kr)));
            if (l == 0)
                for (; i < Dh; i++) acc = __fadd_rn(acc, __fmul_rn(qs[i], kv_at<W>(kc, ks, s, c0 + i, kr)));
        }
        acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 1, 4));
        acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 2, 4));
        if (l == 0 && s < n) sc[s] = __fmul_rn(acc, scale);
    }
}

extern "C" __global__ void attn_scores_q8(float* scores, const float* q2, const signed char* kc, const float* ks, const float* qNorm,
                                          const float* invFreq, const int* pos, int Hq, int Hkv, int Dh, int half, float eps, int cap,
                                          int group) {
    PDL_ENTRY();
    attn_scores_w<KV_Q8>(scores, q2, kc, ks, qNorm, invFreq, pos, Hq, Hkv, Dh, half, eps, cap, group, blockIdx.y);
}

extern "C" __global__ void attn_scores_bf16(float* scores, const float* q2, const u16* kc, const float* qNorm, const float* invFreq,
                                            const int* pos, int Hq, int Hkv, int Dh, int half, float eps, int cap) {
    PDL_ENTRY();
    attn_scores_w<KV_BF16>(scores, q2, kc, 0, qNorm, invFreq, pos, Hq, Hkv, Dh, half, eps, cap, Dh, blockIdx.y);
}

// attn_values_w is attn_values with the cache read at width W (kv_at).
template <int W>
__device__ void attn_values_w(float* o, const float* scores, const float* q2, const void* vc, const float* vs, const int* pos,
                              int Hq, int Hkv, int Dh, int cap, int group, int t) {
    __shared__ double sh[32];
    __shared__ float wsm[ATT_SMEM];
    __shared__ float red[32];
    int h = blockIdx.x;
    int hg = Hq / Hkv, g = h / hg, kvd = Hkv * Dh;
    int n = *pos + t + 1;
    const float* sc = scores + ((i64)t * Hq + h) * cap;
    float mx, inv;
    att_softmax_of(sc, n, red, sh, mx, inv);
    const float* gate = q2 + (i64)t * 2 * Hq * Dh + (i64)h * 2 * Dh + Dh;
    int i = blockIdx.z * blockDim.x + threadIdx.x;
    int col = g * Dh + i;
    kv_rows kr = kv_rows_of(kvd, group);
    if (n <= ATT_SMEM) { // the weights once, then the in-order sums read them from shared memory
        for (int s = threadIdx.x; s < n; s += blockDim.x) wsm[s] = __fmul_rn(exp32k(__fsub_rn(sc[s], mx)), inv);
        __syncthreads();
        if (i >= Dh) return;
        float acc = 0;
        int s = 0;
        for (; s + ATT_B <= n; s += ATT_B) {
            float vv[ATT_B];
#pragma unroll
            for (int k = 0; k < ATT_B; k++) vv[k] = kv_at<W>(vc, vs, s + k, col, kr);
#pragma unroll
            for (int k = 0; k < ATT_B; k++) acc = __fadd_rn(acc, __fmul_rn(wsm[s + k], vv[k]));
        }
        for (; s < n; s++) acc = __fadd_rn(acc, __fmul_rn(wsm[s], kv_at<W>(vc, vs, s, col, kr)));
        o[(i64)t * Hq * Dh + h * Dh + i] = __fmul_rn(acc, sigk(gate[i]));
        return;
    }
    if (i >= Dh) return;
    float acc = 0;
    int s = 0;
    for (; s + ATT_B <= n; s += ATT_B) {
        float vv[ATT_B], ww[ATT_B];
#pragma unroll
        for (int k = 0; k < ATT_B; k++) {
            vv[k] = kv_at<W>(vc, vs, s + k, col, kr);
            ww[k] = sc[s + k];
        }
#pragma unroll
        for (int k = 0; k < ATT_B; k++) acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(exp32k(__fsub_rn(ww[k], mx)), inv), vv[k]));
    }
    for (; s < n; s++) acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(exp32k(__fsub_rn(sc[s], mx)), inv), kv_at<W>(vc, vs, s, col, kr)));
    o[(i64)t * Hq * Dh + h * Dh + i] = __fmul_rn(acc, sigk(gate[i]));
}

extern "C" __global__ void attn_values_q8(float* o, const float* scores, const float* q2, const signed char* vc, const float* vs,
                                          const int* pos, int Hq, int Hkv, int Dh, int cap, int group) {
    PDL_ENTRY();
    attn_values_w<KV_Q8>(o, scores, q2, vc, vs, pos, Hq, Hkv, Dh, cap, group, blockIdx.y);
}

extern "C" __global__ void attn_values_bf16(float* o, const float* scores, const float* q2, const u16* vc, const int* pos,
                                            int Hq, int Hkv, int Dh, int cap) {
    PDL_ENTRY();
    attn_values_w<KV_BF16>(o, scores, q2, vc, 0, pos, Hq, Hkv, Dh, cap, Dh, blockIdx.y);
}

// Prefill attention in tiles (Set.AttnTiled, NVMAI_GPU_ATTN_TILED=1): the
// same products in the same order as attn_scores/attn_values (and their _w
// widths), bit for bit, but each cached K or V row is read once for a tile
// of up to ATT_TR (token, head) rows of one KV group instead of once per
// row. attn_scores reads every key once per query, which made a
// 512-token chunk's scores 18 ms on the H200 (session 7); the tiles cut
// those reads by the tile's rows.
//   attn_qnorm      the queries normed and rotated as attn_scores does
//                   (norm_rotate by a 256-thread block) into qn [T, Hq, Dh];
//   attn_scores_t   scores = (p0+p1)+(p2+p3) times the scale, p_l the sum of
//                   q_j·k_j over j ≡ l (mod 4) ascending (the tail past the
//                   last 4 on p0), which is the quad of attn_scores;
//   attn_softmax_t  each row's scores replaced by its softmax weights,
//                   exp(s−max)·inv with max and inv from att_softmax_of by
//                   a 64-thread block, as attn_values computes them;
//   attn_values_t   o = Σ_s w_s·v_s ascending from zero, times the gate.
// A row r of a block's tile is (token, head) = ((y·ATT_TR + r) / G,
// g·G + (y·ATT_TR + r) % G) for KV group g = blockIdx.x and G = Hq/Hkv.
#define ATT_TR 32 // (token, head) rows of a tile
#define ATT_TS 32 // cached positions of a tile

extern "C" __global__ void attn_qnorm(float* qn, const float* q2, const float* qNorm, const float* invFreq, const int* pos,
                                      int Hq, int Dh, int half, float eps) {
    PDL_ENTRY();
    __shared__ double sh[32];
    int h = blockIdx.x, t = blockIdx.y;
    norm_rotate(qn + ((i64)t * Hq + h) * Dh, q2 + (i64)t * 2 * Hq * Dh + (i64)h * 2 * Dh, qNorm, Dh, eps, invFreq, half, *pos + t, sh);
}

// att_row maps tile row r to its token and head; false past the chunk.
__device__ __forceinline__ bool att_row(int r, int G, int g, int T, int& t, int& h) {
    int flat = blockIdx.y * ATT_TR + r;
    t = flat / G;
    h = g * G + flat % G;
    return t < T;
}

// attn_scores_tw: a block of 256 threads, a tile of ATT_TR rows × ATT_TS
// positions at a time; thread (rg, pg) = (tid/16, tid%16) computes rows
// rg+8i (i < 4) at positions pg and pg+16. Dynamic shared memory:
// (ATT_TR + ATT_TS)·(Dh+1) floats (the pitch keeps a warp's 16 positions
// in 16 banks). blockIdx.z takes every gridDim.z-th position tile.
template <int W>
__device__ void attn_scores_tw(float* scores, const float* qn, const void* kc, const float* ks, const int* pos,
                               int Hq, int Hkv, int Dh, int cap, int group, int T) {
    extern __shared__ float att_sm[];
    int pitch = Dh + 1, G = Hq / Hkv, g = blockIdx.x, kvd = Hkv * Dh, p0 = *pos;
    float* qs = att_sm;
    float* kt = att_sm + ATT_TR * pitch;
    int nmax = 0;
    for (int r = 0; r < ATT_TR; r++) {
        int t, h;
        if (att_row(r, G, g, T, t, h)) nmax = p0 + t + 1;
    }
    for (int e = threadIdx.x; e < ATT_TR * Dh; e += blockDim.x) {
        int r = e / Dh, d = e % Dh, t, h;
        qs[r * pitch + d] = att_row(r, G, g, T, t, h) ? qn[((i64)t * Hq + h) * Dh + d] : 0.0f;
    }
    float scale = (float)(1.0 / sqrt((double)Dh));
    kv_rows kr = kv_rows_of(kvd, group);
    int rg = threadIdx.x >> 4, pg = threadIdx.x & 15, main4 = Dh & ~3;
    for (int s0 = blockIdx.z * ATT_TS; s0 < nmax; s0 += ATT_TS * gridDim.z) {
        __syncthreads(); // the previous tile is used (and qs written)
        for (int e = threadIdx.x; e < ATT_TS * Dh; e += blockDim.x) {
            int p = e / Dh, d = e % Dh;
            kt[p * pitch + d] = s0 + p < nmax ? kv_at<W>(kc, ks, s0 + p, g * Dh + d, kr) : 0.0f;
        }
        __syncthreads();
        float acc[2][2][4];
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int l = 0; l < 4; l++) acc[i][j][l] = 0;
        for (int d = 0; d < main4; d += 4) {
#pragma unroll
            for (int l = 0; l < 4; l++) {
                float kv0 = kt[pg * pitch + d + l], kv1 = kt[(pg + 16) * pitch + d + l];
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    float q = qs[(rg + 16 * i) * pitch + d + l];
                    acc[i][0][l] = __fadd_rn(acc[i][0][l], __fmul_rn(q, kv0));
                    acc[i][1][l] = __fadd_rn(acc[i][1][l], __fmul_rn(q, kv1));
                }
            }
        }
        for (int d = main4; d < Dh; d++) {
            float kv0 = kt[pg * pitch + d], kv1 = kt[(pg + 16) * pitch + d];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float q = qs[(rg + 16 * i) * pitch + d];
                acc[i][0][0] = __fadd_rn(acc[i][0][0], __fmul_rn(q, kv0));
                acc[i][1][0] = __fadd_rn(acc[i][1][0], __fmul_rn(q, kv1));
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int t, h;
            if (!att_row(rg + 16 * i, G, g, T, t, h)) continue;
            int n = p0 + t + 1;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int s = s0 + pg + 16 * j;
                if (s >= n) continue;
                float v = __fadd_rn(__fadd_rn(acc[i][j][0], acc[i][j][1]), __fadd_rn(acc[i][j][2], acc[i][j][3]));
                scores[((i64)t * Hq + h) * cap + s] = __fmul_rn(v, scale);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) attn_scores_t(float* scores, const float* qn, const float* kc, const int* pos,
                                                               int Hq, int Hkv, int Dh, int cap, int T) {
    PDL_ENTRY();
    attn_scores_tw<KV_F32>(scores, qn, kc, 0, pos, Hq, Hkv, Dh, cap, Dh, T);
}

extern "C" __global__ void __launch_bounds__(256) attn_scores_t_q8(float* scores, const float* qn, const signed char* kc, const float* ks,
                                                                  const int* pos, int Hq, int Hkv, int Dh, int cap, int group, int T) {
    PDL_ENTRY();
    attn_scores_tw<KV_Q8>(scores, qn, kc, ks, pos, Hq, Hkv, Dh, cap, group, T);
}

extern "C" __global__ void __launch_bounds__(256) attn_scores_t_bf16(float* scores, const float* qn, const u16* kc, const int* pos,
                                                                    int Hq, int Hkv, int Dh, int cap, int T) {
    PDL_ENTRY();
    attn_scores_tw<KV_BF16>(scores, qn, kc, 0, pos, Hq, Hkv, Dh, cap, Dh, T);
}

// attn_softmax_t: launched with 64 threads (attn_values' block), so the
// float64 denominator is summed in attn_values' order.
extern "C" __global__ void attn_softmax_t(float* scores, const int* pos, int Hq, int cap) {
    PDL_ENTRY();
    __shared__ double sh[32];
    __shared__ float red[32];
    int h = blockIdx.x, t = blockIdx.y;
    int n = *pos + t + 1;
    float* sc = scores + ((i64)t * Hq + h) * cap;
    float mx, inv;
    att_softmax_of(sc, n, red, sh, mx, inv);
    for (int s = threadIdx.x; s < n; s += blockDim.x) sc[s] = __fmul_rn(exp32k(__fsub_rn(sc[s], mx)), inv);
}

// attn_values_tw: a block of 256 threads over ATT_TR rows and 64 head dims
// (blockIdx.z); thread (rg, dc) = (tid/32, tid%32) sums rows rg+8i (i < 4)
// at dims dc and dc+32. Static shared memory: the V tile [ATT_TS][64] and
// the weights [ATT_TR][ATT_TS+1].
template <int W>
__device__ void attn_values_tw(float* o, const float* w, const float* q2, const void* vc, const float* vs, const int* pos,
                               int Hq, int Hkv, int Dh, int cap, int group, int T) {
    __shared__ float vt[ATT_TS][64];
    __shared__ float wt[ATT_TR][ATT_TS + 1];
    int G = Hq / Hkv, g = blockIdx.x, kvd = Hkv * Dh, p0 = *pos, d0 = blockIdx.z * 64;
    int nmax = 0;
    for (int r = 0; r < ATT_TR; r++) {
        int t, h;
        if (att_row(r, G, g, T, t, h)) nmax = p0 + t + 1;
    }
    kv_rows kr = kv_rows_of(kvd, group);
    int rg = threadIdx.x >> 5, dc = threadIdx.x & 31;
    int nr[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int t, h;
        nr[i] = att_row(rg + 8 * i, G, g, T, t, h) ? p0 + t + 1 : 0;
    }
    float acc[4][2] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
    for (int s0 = 0; s0 < nmax; s0 += ATT_TS) {
        __syncthreads();
        for (int e = threadIdx.x; e < ATT_TS * 64; e += blockDim.x) {
            int p = e >> 6, d = e & 63;
            vt[p][d] = s0 + p < nmax && d0 + d < Dh ? kv_at<W>(vc, vs, s0 + p, g * Dh + d0 + d, kr) : 0.0f;
        }
        for (int e = threadIdx.x; e < ATT_TR * ATT_TS; e += blockDim.x) {
            int r = e / ATT_TS, p = e % ATT_TS, t, h;
            bool in = att_row(r, G, g, T, t, h) && s0 + p < p0 + t + 1;
            wt[r][p] = in ? w[((i64)t * Hq + h) * cap + s0 + p] : 0.0f;
        }
        __syncthreads();
        int lim = min(ATT_TS, nmax - s0);
        for (int p = 0; p < lim; p++) {
            float v0 = vt[p][dc], v1 = vt[p][dc + 32];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if (s0 + p >= nr[i]) continue;
                float ww = wt[rg + 8 * i][p];
                acc[i][0] = __fadd_rn(acc[i][0], __fmul_rn(ww, v0));
                acc[i][1] = __fadd_rn(acc[i][1], __fmul_rn(ww, v1));
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int t, h;
        if (!att_row(rg + 8 * i, G, g, T, t, h)) continue;
        const float* gate = q2 + (i64)t * 2 * Hq * Dh + (i64)h * 2 * Dh + Dh;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int d = d0 + dc + 32 * j;
            if (d < Dh) o[((i64)t * Hq + h) * Dh + d] = __fmul_rn(acc[i][j], sigk(gate[d]));
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) attn_values_t(float* o, const float* w, const float* q2, const float* vc, const int* pos,
                                                               int Hq, int Hkv, int Dh, int cap, int T) {
    PDL_ENTRY();
    attn_values_tw<KV_F32>(o, w, q2, vc, 0, pos, Hq, Hkv, Dh, cap, Dh, T);
}

extern "C" __global__ void __launch_bounds__(256) attn_values_t_q8(float* o, const float* w, const float* q2, const signed char* vc,
                                                                  const float* vs, const int* pos, int Hq, int Hkv, int Dh, int cap,
                                                                  int group, int T) {
    PDL_ENTRY();
    attn_values_tw<KV_Q8>(o, w, q2, vc, vs, pos, Hq, Hkv, Dh, cap, group, T);
}

extern "C" __global__ void __launch_bounds__(256) attn_values_t_bf16(float* o, const float* w, const float* q2, const u16* vc,
                                                                    const int* pos, int Hq, int Hkv, int Dh, int cap, int T) {
    PDL_ENTRY();
    attn_values_tw<KV_BF16>(o, w, q2, vc, 0, pos, Hq, Hkv, Dh, cap, Dh, T);
}

// The batched step's attention over an int8 or bfloat16 cache (pkg/gpu
// batch.go): one token of each of up to ROWS_MAX sequences, row r =
// blockIdx.y, whose caches, scales, position, score scratch and its
// capacity come by value; each row runs the one-token kernels' code (t = 0)
// on its own values, so it is bitwise that launch. kv, q2 and o are the
// batch's [N, …] rows.
struct RowInts {
    int v[ROWS_MAX];
};

template <int W>
__device__ __forceinline__ void attn_kv_rows_w(RowPtrs kc, RowPtrs vc, RowPtrs ks, RowPtrs vs, const float* k, const float* v,
                                               const float* kNorm, const float* invFreq, RowPtrs pos, int Hkv, int Dh, int half,
                                               float eps, int group, float* krow) {
    i64 r = blockIdx.y, kvd = (i64)Hkv * Dh;
    attn_kv_w<W>((void*)kc.p[r], (void*)vc.p[r], (float*)ks.p[r], (float*)vs.p[r], k + r * kvd, v + r * kvd, kNorm, invFreq,
                 (const int*)pos.p[r], Hkv, Dh, half, eps, group, krow, 0);
}

extern "C" __global__ void attn_kv_q8_rows(RowPtrs kc, RowPtrs vc, RowPtrs ks, RowPtrs vs, const float* k, const float* v,
                                           const float* kNorm, const float* invFreq, RowPtrs pos, int Hkv, int Dh, int half, float eps,
                                           int group) {
    PDL_ENTRY();
    extern __shared__ float krow[]; // [Dh]
    attn_kv_rows_w<KV_Q8>(kc, vc, ks, vs, k, v, kNorm, invFreq, pos, Hkv, Dh, half, eps, group, krow);
}

extern "C" __global__ void attn_kv_bf16_rows(RowPtrs kc, RowPtrs vc, RowPtrs ks, RowPtrs vs, const float* k, const float* v,
                                             const float* kNorm, const float* invFreq, RowPtrs pos, int Hkv, int Dh, int half, float eps,
                                             int group) {
    PDL_ENTRY();
    extern __shared__ float krow[]; // [Dh]
    attn_kv_rows_w<KV_BF16>(kc, vc, ks, vs, k, v, kNorm, invFreq, pos, Hkv, Dh, half, eps, Dh, krow);
}

template <int W>
__device__ __forceinline__ void attn_scores_rows_w(RowPtrs scores, RowInts cap, const float* q2, RowPtrs kc, RowPtrs ks, const float* qNorm,
                                                   const float* invFreq, RowPtrs pos, int Hq, int Hkv, int Dh, int half, float eps, int group) {
    i64 r = blockIdx.y;
    attn_scores_w<W>((float*)scores.p[r], q2 + r * 2 * Hq * Dh, (const void*)kc.p[r], (const float*)ks.p[r], qNorm, invFreq,
                     (const int*)pos.p[r], Hq, Hkv, Dh, half, eps, cap.v[r], group, 0);
}

extern "C" __global__ void attn_scores_q8_rows(RowPtrs scores, RowInts cap, const float* q2, RowPtrs kc, RowPtrs ks, const float* qNorm,
                                               const float* invFreq, RowPtrs pos, int Hq, int Hkv, int Dh, int half, float eps, int group) {
    PDL_ENTRY();
    attn_scores_rows_w<KV_Q8>(scores, cap, q2, kc, ks, qNorm, invFreq, pos, Hq, Hkv, Dh, half, eps, group);
}

extern "C" __global__ void attn_scores_bf16_rows(RowPtrs scores, RowInts cap, const float* q2, RowPtrs kc, RowPtrs ks, const float* qNorm,
                                                 const float* invFreq, RowPtrs pos, int Hq, int Hkv, int Dh, int half, float eps, int group) {
    PDL_ENTRY();
    attn_scores_rows_w<KV_BF16>(scores, cap, q2, kc, ks, qNorm, invFreq, pos, Hq, Hkv, Dh, half, eps, Dh);
}

template <int W>
__device__ __forceinline__ void attn_values_rows_w(float* o, RowPtrs scores, RowInts cap, const float* q2, RowPtrs vc, RowPtrs vs, RowPtrs pos,
                                                   int Hq, int Hkv, int Dh, int group) {
    i64 r = blockIdx.y;
    attn_values_w<W>(o + r * Hq * Dh, (const float*)scores.p[r], q2 + r * 2 * Hq * Dh, (const void*)vc.p[r], (const float*)vs.p[r],
                     (const int*)pos.p[r], Hq, Hkv, Dh, cap.v[r], group, 0);
}

extern "C" __global__ void attn_values_q8_rows(float* o, RowPtrs scores, RowInts cap, const float* q2, RowPtrs vc, RowPtrs vs, RowPtrs pos,
                                               int Hq, int Hkv, int Dh, int group) {
    PDL_ENTRY();
    attn_values_rows_w<KV_Q8>(o, scores, cap, q2, vc, vs, pos, Hq, Hkv, Dh, group);
}

extern "C" __global__ void attn_values_bf16_rows(float* o, RowPtrs scores, RowInts cap, const float* q2, RowPtrs vc, RowPtrs vs, RowPtrs pos,
                                                 int Hq, int Hkv, int Dh, int group) {
    PDL_ENTRY();
    attn_values_rows_w<KV_BF16>(o, scores, cap, q2, vc, vs, pos, Hq, Hkv, Dh, Dh);
}

// ---------------------------------------------------------------------------
// MoE routing (qwen35 route): softmax in float64 rounded to float32, the k
// most probable (lower id on ties), in ascending id order, weights
// renormalised over the selection. One block per token: expert e is picked
// when fewer than k experts beat it (a higher probability, or an equal one
// and a lower id), which is the set the one-by-one selection takes. With
// fixed (a replayed routing, blocks.RouteFixed) token t's experts are
// fixed[t·k, (t+1)·k), ascending and distinct (the host checked), and only
// the weights come from the softmax, renormalised over them the same way.
#define ROUTE_MAXE 1024
extern "C" __global__ void route(int* sel, float* weight, const float* logits, int E, int k, int stride, const int* fixed) {
    PDL_ENTRY();
    __shared__ double sh[32];
    __shared__ double ex[ROUTE_MAXE];
    __shared__ float probs[ROUTE_MAXE];
    __shared__ unsigned char picked[ROUTE_MAXE];
    __shared__ float red[32];
    __shared__ int chosen[64];
    int t = blockIdx.x;
    const float* l = logits + (i64)t * stride;
    float m = -__int_as_float(0x7f800000);
    for (int e = threadIdx.x; e < E; e += blockDim.x) m = fmaxf(m, l[e]);
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float mm = red[0];
        for (int w = 1; w < (int)((blockDim.x + 31) >> 5); w++) mm = fmaxf(mm, red[w]);
        red[0] = mm;
    }
    __syncthreads();
    double maxLogit = (double)red[0];
    double sum = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        ex[e] = exp((double)l[e] - maxLogit);
        sum += ex[e];
    }
    sum = block_sum_d(sum, sh);
    for (int e = threadIdx.x; e < E; e += blockDim.x) probs[e] = (float)(ex[e] / sum);
    if (fixed) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) chosen[i] = fixed[t * k + i];
        __syncthreads();
    } else {
        __syncthreads();
        for (int e = threadIdx.x; e < E; e += blockDim.x) {
            float p = probs[e];
            int beaten = 0;
            for (int j = 0; j < E; j++) {
                float q = probs[j];
                beaten += (q > p) || (q == p && j < e);
            }
            picked[e] = beaten < k;
        }
        __syncthreads();
        if (threadIdx.x < 32) { // ascending ids: a ballot over 32 experts at a time
            int lane = threadIdx.x, n = 0;
            for (int base = 0; base < E; base += 32) {
                bool f = base + lane < E && picked[base + lane];
                unsigned bal = __ballot_sync(0xffffffffu, f);
                int at = n + __popc(bal & ((1u << lane) - 1));
                if (f && at < k) chosen[at] = base + lane;
                n += __popc(bal);
            }
        }
        __syncthreads();
    }
    if (threadIdx.x < 32) {
        int lane = threadIdx.x;
        if (lane == 0) {
            float total = 0;
            for (int i = 0; i < k; i++) total = __fadd_rn(total, probs[chosen[i]]);
            red[0] = total;
        }
        __syncwarp();
        if (lane < k) {
            sel[t * k + lane] = chosen[lane];
            weight[t * k + lane] = __fdiv_rn(probs[chosen[lane]], red[0]);
        }
        for (int i = lane + 32; i < k; i += 32) { // k above 32
            sel[t * k + i] = chosen[i];
            weight[t * k + i] = __fdiv_rn(probs[chosen[i]], red[0]);
        }
    }
}

// combine: x += Σ_s w_s·routed_s (ascending slots from zero, each product
// rounded) + sigmoid(gate)·shared (qwen35 combineExperts, then addTo).
extern "C" __global__ void combine(float* x, const float* routed, const float* weight, const float* shared, const float* gateLogit,
                                   int k, int H, int gstride) {
    PDL_ENTRY();
    int t = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= H) return;
    float acc = 0;
    for (int s = 0; s < k; s++) acc = __fadd_rn(acc, __fmul_rn(weight[t * k + s], routed[((i64)t * k + s) * H + i]));
    float sg = sigmoid64(gateLogit[(i64)t * gstride]);
    acc = __fadd_rn(acc, __fmul_rn(sg, shared[(i64)t * H + i]));
    x[(i64)t * H + i] = __fadd_rn(x[(i64)t * H + i], acc);
}

// ---------------------------------------------------------------------------
// Sampling and bookkeeping.

// argmax: the index of the largest logit, the lowest on ties (sample.Greedy);
// NaN anywhere gives −1. One block. Each thread scans its elements in
// ascending order keeping the first of its largest (so the pick does not
// depend on how the elements are dealt out), then the block keeps the
// largest, the lowest index on ties. A 16-byte-aligned row is dealt in
// float4s, four in flight a thread: one load at a time made the scan of a
// 248k-token row ~100 µs of a 3.4 ms decode step on the H100, all latency.
__device__ __forceinline__ void argmax_take(float x, int i, float& v, int& idx, int& nan) {
    if (x != x) nan = 1;
    if (x > v || idx == (1 << 30)) { v = x; idx = i; }
}

__device__ __forceinline__ void argmax_body(int* out, const float* logits, int V) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    __shared__ int hasnan;
    if (threadIdx.x == 0) hasnan = 0;
    __syncthreads();
    float v = -__int_as_float(0x7f800000);
    int idx = 1 << 30, nan = 0;
    if ((((unsigned long long)logits) & 15) == 0) {
        const float4* l4 = (const float4*)logits;
        int V4 = V >> 2, bd = blockDim.x;
        for (int c = threadIdx.x; c < V4; c += 4 * bd) {
            float4 q[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (c + u * bd < V4) q[u] = l4[c + u * bd];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int cu = c + u * bd;
                if (cu >= V4) break;
                argmax_take(q[u].x, 4 * cu, v, idx, nan);
                argmax_take(q[u].y, 4 * cu + 1, v, idx, nan);
                argmax_take(q[u].z, 4 * cu + 2, v, idx, nan);
                argmax_take(q[u].w, 4 * cu + 3, v, idx, nan);
            }
        }
        int i = 4 * V4 + threadIdx.x; // the tail: past every thread's float4s
        if (i < V) argmax_take(logits[i], i, v, idx, nan);
    } else {
        for (int i = threadIdx.x; i < V; i += blockDim.x) argmax_take(logits[i], i, v, idx, nan);
    }
    if (nan) hasnan = 1;
    for (int off = 16; off > 0; off >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, off);
        int oi = __shfl_xor_sync(0xffffffffu, idx, off);
        if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
    }
    if ((threadIdx.x & 31) == 0) { bv[threadIdx.x >> 5] = v; bi[threadIdx.x >> 5] = idx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)((blockDim.x + 31) >> 5); w++)
            if (bv[w] > v || (bv[w] == v && bi[w] < idx)) { v = bv[w]; idx = bi[w]; }
        *out = hasnan ? -1 : idx;
    }
}

// Launched with 1024 threads: the bound keeps the float4s in flight within
// the 64 registers a thread such a block may have.
extern "C" __global__ void __launch_bounds__(1024) argmax(int* out, const float* logits, int V) {
    PDL_ENTRY();
    argmax_body(out, logits, V);
}

// head_rows is the batched decode step's tail (pkg/gpu batch.go), block r
// for row r: the row of logits [N, V] copied to its sequence's own buffer
// (dst.p[r]), its greedy pick (argmax's code) into next.p[r], and its
// position (pos.p[r]) advanced by one.
extern "C" __global__ void __launch_bounds__(1024) head_rows(const float* logits, int V, RowPtrs dst, RowPtrs next, RowPtrs pos) {
    PDL_ENTRY();
    i64 r = blockIdx.x;
    const float* row = logits + r * V;
    float* d = (float*)dst.p[r];
    for (int i = threadIdx.x; i < V; i += blockDim.x) d[i] = row[i];
    argmax_body((int*)next.p[r], row, V);
    if (threadIdx.x == 0) *(int*)pos.p[r] += 1;
}

// topk_cand: the candidates of sample.TopKCandidates for the device's
// sampler: the k-th largest logit, found exactly by a radix select over
// order-preserving keys (4 passes of 8 bits), then every logit at least that
// value and not -Inf, compacted in id order. out[0] = how many there are
// (also past cap), out[1] = 1 when the row holds a NaN or +Inf (the host
// then samples the row itself, as the CPU sampler reports those), out[2] =
// the threshold's bits; out[4+2i], out[4+2i+1] = candidate i's id and logit
// bits, for the first cap. One block (1024 threads); 1 <= k < V.
#define TOPK_BATCH 16
__device__ __forceinline__ unsigned int order_key(float x) {
    unsigned int u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
extern "C" __global__ void topk_cand(int* out, const float* logits, int V, int k, int cap) {
    PDL_ENTRY();
    __shared__ unsigned int whist[32][256]; // a histogram per warp
    __shared__ unsigned int hist[256];
    __shared__ unsigned int sprefix, srank;
    __shared__ int bad;
    __shared__ int wsum[32];
    const int tid = threadIdx.x, nt = blockDim.x, wid = tid >> 5, nw = (nt + 31) >> 5;
    if (tid == 0) { sprefix = 0; srank = (unsigned int)k; bad = 0; }
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 32 * 256; i += nt) (&whist[0][0])[i] = 0;
        __syncthreads();
        const unsigned int prefix = sprefix;
        const unsigned int hmask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
        // Logits cluster in a few bins: lanes with the same bin add once
        // (match_any), into their warp's own histogram.
        // TOPK_BATCH loads a thread in flight at once: the row is read from
        // L2, one round trip per batch rather than per value.
        for (int base = 0; base < V; base += nt * TOPK_BATCH) {
            float xs[TOPK_BATCH];
#pragma unroll
            for (int u = 0; u < TOPK_BATCH; u++) {
                int i = base + u * nt + tid;
                xs[u] = i < V ? logits[i] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < TOPK_BATCH; u++) {
                int i = base + u * nt + tid;
                unsigned int bin = 256u; // not counted
                if (i < V) {
                    float x = xs[u];
                    if (shift == 24 && (x != x || x == __int_as_float(0x7f800000))) bad = 1;
                    unsigned int key = order_key(x);
                    if ((key & hmask) == prefix) bin = (key >> shift) & 255u;
                }
                unsigned int peers = __match_any_sync(0xffffffffu, bin);
                if (bin < 256u && (tid & 31) == __ffs(peers) - 1) atomicAdd(&whist[wid][bin], (unsigned int)__popc(peers));
            }
        }
        __syncthreads();
        for (int b = tid; b < 256; b += nt) {
            unsigned int c = 0;
            for (int w2 = 0; w2 < nw; w2++) c += whist[w2][b];
            hist[b] = c;
        }
        __syncthreads();
        if (tid == 0) { // the bin holding the rank-th largest key
            unsigned int rem = srank;
            int b = 255;
            for (; b > 0; b--) {
                if (hist[b] >= rem) break;
                rem -= hist[b];
            }
            sprefix = prefix | ((unsigned int)b << shift);
            srank = rem;
        }
        __syncthreads();
    }
    const unsigned int tkey = sprefix;
    const float thr = __uint_as_float((tkey & 0x80000000u) ? (tkey & 0x7fffffffu) : ~tkey);
    const float ninf = -__int_as_float(0x7f800000);
    // Each warp takes a contiguous segment and reads it coalesced, 32·8
    // values a round; ballots count its candidates, an exclusive scan over
    // the warps places them, and a second read writes them in id order.
    const int lane = tid & 31, w = wid;
    const int wseg = ((V + nw - 1) / nw + 255) & ~255, wlo = min(V, w * wseg), whi = min(V, wlo + wseg);
    int c = 0;
    for (int i0 = wlo; i0 < whi; i0 += 256) {
        float xs[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int i = i0 + 32 * u + lane;
            xs[u] = i < whi ? logits[i] : ninf;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) c += __popc(__ballot_sync(0xffffffffu, xs[u] >= thr && xs[u] != ninf));
    }
    if (lane == 0) wsum[w] = c;
    __syncthreads();
    if (w == 0) {
        int v = lane < nw ? wsum[lane] : 0;
        for (int off = 1; off < 32; off <<= 1) {
            int o = __shfl_up_sync(0xffffffffu, v, off);
            if (lane >= off) v += o;
        }
        if (lane < nw) wsum[lane] = v; // inclusive over warps
    }
    __syncthreads();
    int pos = w > 0 ? wsum[w - 1] : 0;
    for (int i0 = wlo; i0 < whi && pos < cap && c > 0; i0 += 256) { // c: a warp without candidates reads nothing more
        float xs[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int i = i0 + 32 * u + lane;
            xs[u] = i < whi ? logits[i] : ninf;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            bool hit = xs[u] >= thr && xs[u] != ninf;
            unsigned int m = __ballot_sync(0xffffffffu, hit);
            int at = pos + __popc(m & ((1u << lane) - 1u));
            if (hit && at < cap) {
                out[4 + 2 * at] = i0 + 32 * u + lane;
                out[5 + 2 * at] = __float_as_int(xs[u]);
            }
            pos += __popc(m);
        }
    }
    if (tid == 0) {
        out[0] = wsum[nw - 1];
        out[1] = bad;
        out[2] = (int)__float_as_uint(thr);
        out[3] = 0;
    }
}

// Sampling on the device: pkg/sample's Finish, bit for bit. Every
// float64 operation is an explicit round-to-nearest intrinsic (the file is
// compiled with --fmad=false too), the exponential is sample.Exp step for
// step (pexp), and every sum is taken in Finish's order: a row's sums in
// blocks of SAMP_BLOCK consecutive ids, each block in order, then the
// blocks in order; removed tokens weigh 0, which changes no sum.
#define SAMP_BLOCK 512
#define SAMP_CAP 1024 // the most candidates samp_cand takes (gpu.MaxCandidates)

__device__ __forceinline__ double pow2d(int k) { return __longlong_as_double((long long)(k + 1023) << 52); }

// pexp is sample.Exp.
__device__ double pexp(double x) {
    if (x != x) return x;
    if (x > 7.09782712893383973096e+02) return __longlong_as_double(0x7ff0000000000000LL);
    if (x < -7.45133219101941108420e+02) return 0.0;
    const double ln2Hi = 6.93147180369123816490e-01, ln2Lo = 1.90821492927058770002e-10,
                 log2e = 1.44269504088896338700e+00;
    const double p1 = 1.66666666666666657415e-01, p2 = -2.77777777770155933842e-03,
                 p3 = 6.61375632143793436117e-05, p4 = -1.65339022054652515390e-06,
                 p5 = 4.13813679705723846039e-08;
    int k = x < 0 ? __double2int_rz(__dsub_rn(__dmul_rn(log2e, x), 0.5))
                  : __double2int_rz(__dadd_rn(__dmul_rn(log2e, x), 0.5));
    double hi = __dsub_rn(x, __dmul_rn((double)k, ln2Hi));
    double lo = __dmul_rn((double)k, ln2Lo);
    double r = __dsub_rn(hi, lo);
    double t = __dmul_rn(r, r);
    double c = __dmul_rn(t, p5);
    c = __dmul_rn(t, __dadd_rn(p4, c));
    c = __dmul_rn(t, __dadd_rn(p3, c));
    c = __dmul_rn(t, __dadd_rn(p2, c));
    c = __dsub_rn(r, __dmul_rn(t, __dadd_rn(p1, c)));
    double y = __dsub_rn(1.0, __dsub_rn(__dsub_rn(lo, __ddiv_rn(__dmul_rn(r, c), __dsub_rn(2.0, c))), hi));
    if (k < -1021) return __dmul_rn(__dmul_rn(y, pow2d(k + 54)), pow2d(-54));
    if (k > 1023) return __dmul_rn(__dmul_rn(y, pow2d(k - 1)), 2.0);
    return __dmul_rn(y, pow2d(k));
}

// pexp_eval: out[i] = pexp(x[i]), for the tests.
extern "C" __global__ void pexp_eval(double* out, const double* x, int n) {
    PDL_ENTRY();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = pexp(x[i]);
}

// samp_count: counts[ids[i]]++ for the n tokens a sampler accepted since
// the last step (the penalties' history).
extern "C" __global__ void samp_count(int* counts, const int* ids, int n, int V) {
    PDL_ENTRY();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int id = ids[i];
        if (id >= 0 && id < V) atomicAdd(&counts[id], 1);
    }
}

// samp_pen: out = logits with the penalties of the counts (sample's
// penalize): repetition (rep ≠ 0, 1) divides a positive logit and
// multiplies a negative one, then presence + frequency·count is taken off.
extern "C" __global__ void samp_pen(float* out, const float* logits, const int* counts, int V, double rep, double pres, double freq) {
    PDL_ENTRY();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= V) return;
    float l = logits[i];
    int n = counts[i];
    if (n > 0) {
        double x = (double)l;
        if (rep != 0.0 && rep != 1.0) x = x > 0.0 ? __ddiv_rn(x, rep) : __dmul_rn(x, rep);
        x = __dsub_rn(x, __dadd_rn(pres, __dmul_rn(freq, (double)n)));
        l = __double2float_rn(x);
    }
    out[i] = l;
}

// order_key64: a double's bits as an unsigned key in the double's order.
__device__ __forceinline__ unsigned long long order_key64(double x) {
    unsigned long long u = (unsigned long long)__double_as_longlong(x);
    return (u >> 63) ? ~u : (u | 0x8000000000000000ULL);
}

// samp_rows: every token's weight over the whole row (0 for tokens top-k,
// top-p's cut (cut: the least logit/T kept, or null) or, with minp set,
// min-p removes) into w, and each block's sum, in order, into bsum; keys
// (or null): each token's logit/T as an order-preserving key. The largest logit is logits[*maxid] (argmax); status[0] = 1
// when the row is one the host must report (NaN, +Inf, every logit −Inf).
// thrbits: the top-k threshold's bits (topk_cand's out[2]) or null.
extern "C" __global__ void samp_rows(double* w, double* bsum, unsigned long long* keys, int* status, const float* logits,
                                     const int* maxid, const int* thrbits, const double* cut, int V, double T, double logMinP, int minp) {
    PDL_ENTRY();
    __shared__ double sw[SAMP_BLOCK];
    const float ninf = -__int_as_float(0x7f800000);
    int mi = *maxid;
    float lmax = mi >= 0 ? logits[mi] : ninf;
    bool bad = mi < 0 || lmax == -ninf || lmax == ninf;
    double m = __ddiv_rn((double)lmax, T);
    float thr = thrbits ? __int_as_float(*thrbits) : ninf;
    const double lo = cut ? *cut : -__longlong_as_double(0x7ff0000000000000LL);
    int i = blockIdx.x * SAMP_BLOCK + threadIdx.x;
    double x = 0.0;
    if (i < V && !bad) {
        float l = logits[i];
        double c = __ddiv_rn((double)l, T);
        if (l >= thr && l != ninf && c >= lo && !(minp && c < __dadd_rn(m, logMinP))) x = pexp(__dsub_rn(c, m));
        w[i] = x;
        if (keys) keys[i] = order_key64(c);
    }
    sw[threadIdx.x] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        double part = 0.0;
        int n = min(SAMP_BLOCK, V - blockIdx.x * SAMP_BLOCK);
        for (int j = 0; j < n; j++) part = __dadd_rn(part, sw[j]);
        bsum[blockIdx.x] = part;
        if (bad && blockIdx.x == 0) status[0] = 1;
    }
}

// samp_pick: the draw (sample's draw and pickInBlock) over the n entries
// (ws, ids) in id order, blocked by id: the first whose running weight
// passes u·total, else the last weighted one. One thread.
__device__ int samp_pick(const double* ws, const int* ids, int n, double u) {
    double total = 0.0;
    for (int lo = 0; lo < n;) {
        int b = ids[lo] / SAMP_BLOCK, hi = lo;
        double part = 0.0;
        for (; hi < n && ids[hi] / SAMP_BLOCK == b; hi++) part = __dadd_rn(part, ws[hi]);
        total = __dadd_rn(total, part);
        lo = hi;
    }
    double t = __dmul_rn(u, total), done = 0.0;
    int last = 0;
    for (int lo = 0; lo < n;) {
        int b = ids[lo] / SAMP_BLOCK, hi = lo;
        double part = 0.0;
        for (; hi < n && ids[hi] / SAMP_BLOCK == b; hi++) part = __dadd_rn(part, ws[hi]);
        if (t < __dadd_rn(done, part)) {
            double run = done;
            int lastIn = lo;
            for (int i = lo; i < hi; i++) {
                if (ws[i] > 0.0) lastIn = i;
                run = __dadd_rn(run, ws[i]);
                if (t < run) return ids[i];
            }
            return ids[lastIn];
        }
        done = __dadd_rn(done, part);
        for (int i = lo; i < hi; i++)
            if (ws[i] > 0.0) last = i;
        lo = hi;
    }
    return ids[last];
}

// samp_mass is sample.mass: a weight in top-p's fixed point (2^40).
__device__ __forceinline__ long long samp_mass(double w) { return __double2ll_rz(__dmul_rn(w, 1099511627776.0)); }

// samp_limit is top-p's mass limit, int64(float64(total)·topP).
__device__ __forceinline__ long long samp_limit(long long total, double topP) {
    return __double2ll_rz(__dmul_rn(__ll2double_rn(total), topP));
}

// samp_nucleus: top-p's cut over samp_rows' weights and keys of the row
// (sample's nucleus): the least value v of logit/T such that the mass of
// the tokens with a larger value is below the limit, found by a radix
// select (8 passes of 8 bits over order-preserving keys) with each bin's
// mass in exact integers, so no sort and no order of sums. *cut = v.
// One block.
extern "C" __global__ void samp_nucleus(double* cut, const unsigned long long* keys, const double* w, int V, double topP) {
    PDL_ENTRY();
    // NUC_SUB histograms, a few warps to each, so a pass's atomics meet
    // few others on one address; summed before the scan.
#define NUC_SUB 8
    __shared__ unsigned long long hmass[NUC_SUB][256];
    __shared__ unsigned int hcnt[NUC_SUB][256];
    __shared__ unsigned long long stotal, sprefix, sabove;
    const int tid = threadIdx.x, nt = blockDim.x, sub = (tid >> 5) % NUC_SUB;
    if (tid == 0) { stotal = 0; sprefix = 0; sabove = 0; }
    __syncthreads();
    unsigned long long mine = 0;
    for (int i = tid; i < V; i += nt) mine += (unsigned long long)samp_mass(w[i]);
    atomicAdd(&stotal, mine);
    __syncthreads();
    const long long limit = samp_limit((long long)stotal, topP);
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = tid; b < NUC_SUB * 256; b += nt) { (&hmass[0][0])[b] = 0; (&hcnt[0][0])[b] = 0; }
        __syncthreads();
        const unsigned long long prefix = sprefix;
        const unsigned long long hmask = shift == 56 ? 0ULL : (~0ULL << (shift + 8));
        // Runs of one bin are added once (neighbouring values share their
        // high bits), so the histograms see few atomics in the first passes.
        int cur = -1;
        unsigned long long acc = 0;
        unsigned int cnt = 0;
        for (int i = tid; i < V; i += nt) {
            unsigned long long key = keys[i];
            if ((key & hmask) != prefix) continue;
            int bin = (int)((key >> shift) & 255ULL);
            if (bin != cur) {
                if (cur >= 0) { atomicAdd(&hmass[sub][cur], acc); atomicAdd(&hcnt[sub][cur], cnt); }
                cur = bin; acc = 0; cnt = 0;
            }
            acc += (unsigned long long)samp_mass(w[i]);
            cnt++;
        }
        if (cur >= 0) { atomicAdd(&hmass[sub][cur], acc); atomicAdd(&hcnt[sub][cur], cnt); }
        __syncthreads();
        for (int b = tid; b < 256; b += nt) {
            for (int j = 1; j < NUC_SUB; j++) { hmass[0][b] += hmass[j][b]; hcnt[0][b] += hcnt[j][b]; }
        }
        __syncthreads();
        if (tid == 0) { // the lowest bin whose top value is kept (else the highest bin)
            long long above = (long long)sabove;
            int pick = -1, top = -1;
            for (int b = 255; b >= 0; b--) {
                if (hcnt[0][b] == 0) continue;
                if (top < 0) top = b;
                if (above >= limit) break;
                pick = b;
                sabove = (unsigned long long)above;
                above += (long long)hmass[0][b];
            }
            if (pick < 0) pick = top;
            sprefix = prefix | ((unsigned long long)pick << shift);
        }
        __syncthreads();
    }
    if (tid == 0) {
        unsigned long long k = sprefix;
        unsigned long long u = (k >> 63) ? (k & 0x7fffffffffffffffULL) : ~k;
        *cut = __longlong_as_double((long long)u);
    }
#undef NUC_SUB
}

// samp_draw: the draw over samp_rows' whole row (no top-p): out[0] = the
// token, or −1 when status says the host must see the row. One thread.
extern "C" __global__ void samp_draw(int* out, const double* w, const double* bsum, const int* status, int V, double u) {
    PDL_ENTRY();
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    if (status[0] != 0) { out[0] = -1; return; }
    const int nb = (V + SAMP_BLOCK - 1) / SAMP_BLOCK;
    double total = 0.0;
    for (int b = 0; b < nb; b++) total = __dadd_rn(total, bsum[b]);
    double t = __dmul_rn(u, total), done = 0.0;
    for (int b = 0; b < nb; b++) {
        double next = __dadd_rn(done, bsum[b]);
        if (t < next) {
            const int lo = b * SAMP_BLOCK, hi = min(V, lo + SAMP_BLOCK);
            double run = done;
            int lastIn = lo;
            for (int i = lo; i < hi; i++) {
                if (w[i] > 0.0) lastIn = i;
                run = __dadd_rn(run, w[i]);
                if (t < run) { out[0] = i; return; }
            }
            out[0] = lastIn;
            return;
        }
        done = next;
    }
    int b = nb - 1; // rounding left the pick past the end: the last weighted token
    while (b > 0 && !(bsum[b] > 0.0)) b--;
    int i = min(V, b * SAMP_BLOCK + SAMP_BLOCK) - 1;
    while (i > b * SAMP_BLOCK && !(w[i] > 0.0)) i--;
    out[0] = i;
}

// samp_cand: Finish over topk_cand's list of a top-k filter (cand: every
// candidate, ids ascending, with their logits): top-p's cut (the list
// ranked by value, masses in exact integers as samp_nucleus), min-p, and
// the draw by id. out[0] = the token, or −1 when the host must decide (the
// row is one it reports, or the list overflowed). One block of SAMP_CAP
// threads.
extern "C" __global__ void __launch_bounds__(SAMP_CAP) samp_cand(int* out, const int* cand, double T, double topP, double logMinP, double u) {
    PDL_ENTRY();
    __shared__ int ids[SAMP_CAP], order[SAMP_CAP], kid[SAMP_CAP];
    __shared__ double c[SAMP_CAP], w[SAMP_CAP], kw[SAMP_CAP];
    __shared__ double sm;
    const int tid = threadIdx.x, n = cand[0];
    if (cand[1] != 0 || n < 1 || n > SAMP_CAP) {
        if (tid == 0) out[0] = -1;
        return;
    }
    if (tid < n) {
        ids[tid] = cand[4 + 2 * tid];
        c[tid] = __ddiv_rn((double)__int_as_float(cand[5 + 2 * tid]), T);
    }
    __syncthreads();
    if (tid == 0) {
        double m = c[0];
        for (int j = 1; j < n; j++) m = fmax(m, c[j]);
        sm = m;
    }
    __syncthreads();
    if (tid < n) w[tid] = pexp(__dsub_rn(c[tid], sm));
    if (topP > 0.0 && tid < n) { // rank by value, ties by position: a sort
        int r = 0;
        const double cj = c[tid];
        for (int i = 0; i < n; i++) r += (c[i] > cj || (c[i] == cj && i < tid)) ? 1 : 0;
        order[r] = tid;
    }
    __syncthreads();
    if (tid != 0) return;
    double lo = -__longlong_as_double(0x7ff0000000000000LL);
    if (topP > 0.0) {
        long long total = 0, above = 0;
        for (int j = 0; j < n; j++) total += samp_mass(w[j]);
        const long long limit = samp_limit(total, topP);
        lo = c[order[0]];
        for (int r = 0; r < n && above < limit;) {
            lo = c[order[r]];
            for (; r < n && c[order[r]] == lo; r++) above += samp_mass(w[order[r]]);
        }
    }
    const double minThr = __dadd_rn(sm, logMinP);
    int nk = 0;
    for (int j = 0; j < n; j++)
        if (c[j] >= lo && c[j] >= minThr) { kw[nk] = w[j]; kid[nk] = ids[j]; nk++; }
    out[0] = samp_pick(kw, kid, nk, u);
}

// advance: *pos += T, at the end of a step (position lives on the device so
// one captured graph serves every step).
extern "C" __global__ void advance(int* pos, int T) {
    PDL_ENTRY();
    if (threadIdx.x == 0 && blockIdx.x == 0) *pos += T;
}

// ---------------------------------------------------------------------------
// Streamed experts (docs/gpu.md, "Streaming experts into VRAM"): a MoE layer
// keeps S of its E experts in a VRAM slot pool (slot s at pool + s·stride);
// every expert lives in page-locked host memory mapped into the device
// (expert e at host + e·stride). A layer's table tab is int32 words:
// slotOf [E] (−1: not in VRAM), expertOf [S] (−1: empty), lastUse [S] (u32
// stamps: 2s for a use by decode step s, 2s−1 for a read-ahead guess for
// step s; 0: never), the step counter [1], the fill count [1], the fill
// list [2k] (slot, expert), the read-ahead count [1] and list [2k]. stats
// are u64 counters: [0] decode hits, [1] decode misses, [2] decode bytes
// copied from the host, [3] prefill experts staged from VRAM, [4] from the
// host, [5] the host bytes, [6] read-ahead guesses, [7] picks that were
// guessed, [8] guesses copied ahead, [9] picks found in a slot copied ahead
// for them, [10] the bytes copied ahead.
#define SLOT_MAXS 1024
#define SLOT_MAXE 1024
#define SLOT_COPY_UNROLL 4

__device__ __forceinline__ unsigned long long block_min_u64(unsigned long long v, unsigned long long* sh) {
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w < v ? w : v;
    }
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    if (threadIdx.x == 0) {
        unsigned long long r = sh[0];
        for (int i = 1; i < nw; i++) r = sh[i] < r ? sh[i] : r;
        sh[0] = r;
    }
    __syncthreads();
    unsigned long long r = sh[0];
    __syncthreads();
    return r;
}

// slot_resolve gives a decode step's k picks sel[0..k) their VRAM slots
// (slotref.go's resolve is the reference, step for step): first every
// pick already in a slot (a hit) marks that slot used by this step; then
// each miss, in router order, takes the least recently used slot this step
// has not used (the lowest index among equals; never-used slots, at 0,
// first), evicts its expert, and is appended to the fill list. slotSel [k]
// is each pick's slot. A hit on a slot stamped by this step's read-ahead
// (2s−1) counts as a guessed pick, and as a copy used when the read-ahead
// list copied it. One block; S ≤ SLOT_MAXS, k ≤ 64.
extern "C" __global__ void slot_resolve(int* slotSel, int* tab, unsigned long long* stats, const int* sel, int E, int S, int k, i64 stride) {
    PDL_ENTRY();
    __shared__ u32 last[SLOT_MAXS];
    __shared__ unsigned long long red[32];
    __shared__ int missAt[64];
    __shared__ int nmiss;
    __shared__ u32 stampS;
    int* slotOf = tab;
    int* expertOf = tab + E;
    u32* lastUse = (u32*)(tab + E + S);
    u32* counter = (u32*)(tab + E + 2 * S);
    int* nfill = tab + E + 2 * S + 1;
    int* fill = tab + E + 2 * S + 2;
    const int* nahead = fill + 2 * k;
    const int* ahead = nahead + 1;
    __shared__ int guessed, used;
    for (int s = threadIdx.x; s < S; s += blockDim.x) last[s] = lastUse[s];
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 step = counter[0] + 1;
        counter[0] = step;
        u32 stamp = 2u * step;
        stampS = stamp;
        int n = 0, gs = 0, us = 0;
        for (int i = 0; i < k; i++) {
            int s = slotOf[sel[i]];
            if (s >= 0) {
                if (last[s] == stamp - 1) { // guessed for this step by slot_prefetch
                    gs++;
                    for (int j = 0; j < nahead[0]; j++) us += ahead[2 * j] == s && ahead[2 * j + 1] == sel[i];
                }
                slotSel[i] = s;
                last[s] = stamp;
            } else {
                missAt[n++] = i;
            }
        }
        nmiss = n;
        guessed = gs;
        used = us;
    }
    __syncthreads();
    int n = nmiss;
    u32 stamp = stampS;
    for (int j = 0; j < n; j++) { // the same trips for every thread: block_min_u64 syncs
        unsigned long long best = ~0ull;
        for (int s = threadIdx.x; s < S; s += blockDim.x) {
            if (last[s] == stamp) continue;
            unsigned long long key = ((unsigned long long)last[s] << 32) | (unsigned long long)s;
            best = key < best ? key : best;
        }
        best = block_min_u64(best, red);
        if (threadIdx.x == 0) {
            int x = (int)(best & 0xffffffffull);
            int i = missAt[j];
            int e = sel[i];
            int old = expertOf[x];
            if (old >= 0) slotOf[old] = -1;
            slotOf[e] = x;
            expertOf[x] = e;
            last[x] = stamp;
            slotSel[i] = x;
            fill[2 * j] = x;
            fill[2 * j + 1] = e;
        }
        __syncthreads();
    }
    for (int s = threadIdx.x; s < S; s += blockDim.x) lastUse[s] = last[s];
    if (threadIdx.x == 0) {
        nfill[0] = n;
        stats[0] += (unsigned long long)(k - n);
        stats[1] += (unsigned long long)n;
        stats[2] += (unsigned long long)n * (unsigned long long)stride;
        stats[7] += (unsigned long long)guessed;
        stats[9] += (unsigned long long)used;
    }
}

// slot_prefetch is the read-ahead of a decode step's experts for one layer
// (slotref.go's prefetch is the reference): its guesses are the k experts
// with the highest logits [E] (the layer's router applied to the hidden
// state entering the layer; NaN as −∞, the lower id on ties), in ascending
// id order. Each guess already in a slot stamps that slot 2s−1 (s the step
// about to resolve: the step counter + 1); then each other guess, in
// order, takes the least recently used slot not stamped 2s−1 (the lowest
// index among equals), evicts its expert, is stamped 2s−1 and is appended
// to the read-ahead list, which slot_fill_ahead copies. The step's own
// resolve then sees the guesses as hits, and a wrong guess is only a slot
// used half a step before the step's picks. The step counter is left as
// it is. One block; S ≤ SLOT_MAXS, E ≤ SLOT_MAXE, k ≤ 64.
extern "C" __global__ void slot_prefetch(int* tab, unsigned long long* stats, const float* logits, int E, int S, int k, i64 stride) {
    PDL_ENTRY();
    __shared__ u32 last[SLOT_MAXS];
    __shared__ float key[SLOT_MAXE];
    __shared__ unsigned char picked[SLOT_MAXE];
    __shared__ unsigned long long red[32];
    __shared__ int guess[64];
    __shared__ int missAt[64];
    __shared__ int nguess, nmiss;
    int* slotOf = tab;
    int* expertOf = tab + E;
    u32* lastUse = (u32*)(tab + E + S);
    const u32* counter = (const u32*)(tab + E + 2 * S);
    int* nahead = tab + E + 2 * S + 2 + 2 * k;
    int* ahead = nahead + 1;
    u32 stamp = 2u * counter[0] + 1u;
    for (int s = threadIdx.x; s < S; s += blockDim.x) last[s] = lastUse[s];
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        float v = logits[e];
        key[e] = v != v ? -__int_as_float(0x7f800000) : v;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        float p = key[e];
        int beaten = 0;
        for (int j = 0; j < E; j++) {
            float q = key[j];
            beaten += (q > p) || (q == p && j < e);
        }
        picked[e] = beaten < k;
    }
    __syncthreads();
    if (threadIdx.x < 32) { // ascending ids: a ballot over 32 experts at a time
        int lane = threadIdx.x, n = 0;
        for (int base = 0; base < E; base += 32) {
            bool f = base + lane < E && picked[base + lane];
            unsigned bal = __ballot_sync(0xffffffffu, f);
            int at = n + __popc(bal & ((1u << lane) - 1));
            if (f && at < k) guess[at] = base + lane;
            n += __popc(bal);
        }
        if (lane == 0) nguess = n < k ? n : k;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int m = 0;
        for (int i = 0; i < nguess; i++) {
            int s = slotOf[guess[i]];
            if (s >= 0) {
                last[s] = stamp;
            } else {
                missAt[m++] = i;
            }
        }
        nmiss = m;
    }
    __syncthreads();
    int n = nmiss;
    for (int j = 0; j < n; j++) { // the same trips for every thread: block_min_u64 syncs
        unsigned long long best = ~0ull;
        for (int s = threadIdx.x; s < S; s += blockDim.x) {
            if (last[s] == stamp) continue;
            unsigned long long key2 = ((unsigned long long)last[s] << 32) | (unsigned long long)s;
            best = key2 < best ? key2 : best;
        }
        best = block_min_u64(best, red);
        if (threadIdx.x == 0) {
            int x = (int)(best & 0xffffffffull);
            int e = guess[missAt[j]];
            int old = expertOf[x];
            if (old >= 0) slotOf[old] = -1;
            slotOf[e] = x;
            expertOf[x] = e;
            last[x] = stamp;
            ahead[2 * j] = x;
            ahead[2 * j + 1] = e;
        }
        __syncthreads();
    }
    for (int s = threadIdx.x; s < S; s += blockDim.x) lastUse[s] = last[s];
    if (threadIdx.x == 0) {
        nahead[0] = n;
        stats[6] += (unsigned long long)nguess;
        stats[8] += (unsigned long long)n;
        stats[10] += (unsigned long long)n * (unsigned long long)stride;
    }
}

// slot_fill_ahead copies slot_prefetch's read-ahead list from the mapped
// host memory into the slots, on the side stream beside the layer's
// attention or delta rule: the records are one run of 16-byte words that
// the grid (a few blocks, sized by the host so the copy leaves the SMs to
// the compute it overlaps) strides over, SLOT_COPY_UNROLL loads in flight
// a thread to keep the bus busy. A nonzero *skip (a bench's measurement
// of the step without its copies, slot_fill too) copies nothing.
extern "C" __global__ void slot_fill_ahead(u8* pool, const u8* host, const int* tab, int E, int S, int k, i64 stride, const int* skip) {
    PDL_ENTRY();
    if (skip && skip[0]) return;
    const int* nahead = tab + E + 2 * S + 2 + 2 * k;
    const int* ahead = nahead + 1;
    i64 per = stride / 16;
    i64 total = (i64)nahead[0] * per;
    i64 threads = (i64)gridDim.x * blockDim.x;
    for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < total; j += threads * SLOT_COPY_UNROLL) {
        uint4 v[SLOT_COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < SLOT_COPY_UNROLL; u++) {
            i64 at = j + (i64)u * threads;
            if (at < total) {
                i64 i = at / per, w = at - i * per;
                v[u] = ((const uint4*)(host + (i64)ahead[2 * i + 1] * stride))[w];
            }
        }
#pragma unroll
        for (int u = 0; u < SLOT_COPY_UNROLL; u++) {
            i64 at = j + (i64)u * threads;
            if (at < total) {
                i64 i = at / per, w = at - i * per;
                ((uint4*)(pool + (i64)ahead[2 * i] * stride))[w] = v[u];
            }
        }
    }
}

// slot_copy copies this block's share (blockIdx.y of gridDim.y) of one
// stride-byte record from src to dst, 16 bytes a load, SLOT_COPY_UNROLL
// loads in flight a thread (the source may be host memory over the bus).
__device__ __forceinline__ void slot_copy(u8* dst, const u8* src, i64 stride) {
    const uint4* s = (const uint4*)src;
    uint4* d = (uint4*)dst;
    i64 n = stride / 16;
    i64 per = (n + gridDim.y - 1) / gridDim.y;
    i64 begin = (i64)blockIdx.y * per, end = min(n, begin + per);
    for (i64 j = begin + threadIdx.x; j < end; j += (i64)blockDim.x * SLOT_COPY_UNROLL) {
        uint4 v[SLOT_COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < SLOT_COPY_UNROLL; u++) {
            i64 at = j + (i64)u * blockDim.x;
            if (at < end) v[u] = s[at];
        }
#pragma unroll
        for (int u = 0; u < SLOT_COPY_UNROLL; u++) {
            i64 at = j + (i64)u * blockDim.x;
            if (at < end) d[at] = v[u];
        }
    }
}

// slot_fill copies each expert of slot_resolve's fill list from the mapped
// host memory into its slot: block (i, b) copies part b of entry i; blocks
// past the fill count return, and all of them when *skip is nonzero (see
// slot_fill_ahead).
extern "C" __global__ void slot_fill(u8* pool, const u8* host, const int* tab, int E, int S, i64 stride, const int* skip) {
    PDL_ENTRY();
    if (skip && skip[0]) return;
    const int* nfill = tab + E + 2 * S + 1;
    const int* fill = tab + E + 2 * S + 2;
    int i = blockIdx.x;
    if (i >= nfill[0]) return;
    int slot = fill[2 * i], e = fill[2 * i + 1];
    slot_copy(pool + (i64)slot * stride, host + (i64)e * stride, stride);
}

// expert_need marks need[e] = 1 for every expert of sel [n] (a prefill
// pass's picks), 0 for the others. One block.
extern "C" __global__ void expert_need(int* need, const int* sel, int n, int E) {
    PDL_ENTRY();
    for (int e = threadIdx.x; e < E; e += blockDim.x) need[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) need[sel[i]] = 1;
}

// expert_stage copies every needed expert e into staging + e·stride, from
// its VRAM slot when it has one, else from the mapped host memory: block
// (e, b) copies part b. The slot tables are only read.
extern "C" __global__ void expert_stage(u8* staging, const u8* pool, const u8* host, const int* need, const int* tab,
                                        unsigned long long* stats, i64 stride) {
    PDL_ENTRY();
    int e = blockIdx.x;
    if (!need[e]) return;
    int s = tab[e];
    const u8* src = s >= 0 ? pool + (i64)s * stride : host + (i64)e * stride;
    slot_copy(staging + (i64)e * stride, src, stride);
    if (blockIdx.y == 0 && threadIdx.x == 0) {
        if (s >= 0) {
            atomicAdd(&stats[3], 1ull);
        } else {
            atomicAdd(&stats[4], 1ull);
            atomicAdd(&stats[5], (unsigned long long)stride);
        }
    }
}
