// nvmai GPU kernels that only Qwen3.8 (qwen4_exp) needs: the four-stream
// gated residual, the PLE layer, the sigmoid-gated Gated DeltaNet output and
// the QSA indexer. This file is appended to pkg/gpu/gpukernels' kernels.cu
// and compiled with it as a second module (Load), so its helpers (exp32k,
// sigk, sigmoid64, inv_rms, stage, the attention kernels) are in scope.
// Every kernel names the Go reference it reproduces; the tests on a GPU
// machine compare them (pkg/gpu/qwen38gpu, NVMAI_GPU=1).

// q38_rep: every stream of R [T, S·H] starts as the embedding x [T, H]
// (qwen38 forwardChunk).
extern "C" __global__ void q38_rep(float* R, const float* x, int H, int S) {
    PDL_ENTRY();
    int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= H) return;
    float v = x[(i64)t * H + i];
    for (int s = 0; s < S; s++) R[(i64)t * S * H + s * H + i] = v;
}

// q38_gnorm: the grouped RMSNorm (qwen38 groupedRMSNorm): block (s, t)
// normalises stream s of row t with its own slice of scale [S·H]. The sum
// of squares is float64 (a block tree, as pkg/gpu's rmsnorm).
extern "C" __global__ void q38_gnorm(float* out, const float* x, const float* scale, int H, int S, float eps) {
    PDL_ENTRY();
    __shared__ double sh[32];
    int s = blockIdx.x, t = blockIdx.y;
    i64 base = (i64)t * S * H + (i64)s * H;
    float inv = inv_rms(x + base, H, eps, sh);
    for (int i = threadIdx.x; i < H; i += blockDim.x) out[base + i] = __fmul_rn(__fmul_rn(x[base + i], inv), scale[s * H + i]);
}

// q38_hc_act: a = silu(a / S) over n values (qwen38 read: divide, then
// kernels.SiLU). Bitwise.
extern "C" __global__ void q38_hc_act(float* a, int n, float S) {
    PDL_ENTRY();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = __fdiv_rn(a[i], S);
    a[i] = __fmul_rn(v, sigk(v));
}

// q38_hc_mean: x[t, i] = (Σ_s sigmoid(m[t, s·H+i])·rn[t, s·H+i]) / S, the
// streams in order (qwen38 read: kernels.Sigmoid on the read gates, then
// the mean). Bitwise.
extern "C" __global__ void q38_hc_mean(float* x, const float* m, const float* rn, int H, int S) {
    PDL_ENTRY();
    int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= H) return;
    i64 row = (i64)t * S * H;
    float acc = 0;
    for (int s = 0; s < S; s++) acc = __fadd_rn(acc, __fmul_rn(sigk(m[row + s * H + i]), rn[row + s * H + i]));
    x[(i64)t * H + i] = __fdiv_rn(acc, (float)S);
}

// q38_hc_wgate: the write gates c = 2·sigmoid(c / S) over n values (qwen38
// read: blocks.Sigmoid32, float64 inside).
extern "C" __global__ void q38_hc_wgate(float* c, int n, float S) {
    PDL_ENTRY();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    c[i] = __fmul_rn(2.0f, sigmoid64(__fdiv_rn(c[i], S)));
}

// q38_hc_write: R[t, s·H+i] += c[t, s]·y[t, i] (qwen38 write). Bitwise.
extern "C" __global__ void q38_hc_write(float* R, const float* c, const float* y, int H, int S) {
    PDL_ENTRY();
    int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= H) return;
    float v = y[(i64)t * H + i];
    for (int s = 0; s < S; s++) {
        i64 at = (i64)t * S * H + s * H + i;
        R[at] = __fadd_rn(R[at], __fmul_rn(c[t * S + s], v));
    }
}

// q38_ple_gate: block (s, t) forms the PLE's gated value of stream s,
// u_s = sigmoid(ssqrt(kn_s·qn_s / sqrt(H)))·v (qwen38 pleBlock: the dot in
// index order in float32, signedSqrt, blocks.Sigmoid32). One thread sums,
// as the Go loop does, so the gate is bitwise.
extern "C" __global__ void q38_ple_gate(float* u, const float* kn, const float* qn, const float* v, int H, int S, float sqrtH) {
    PDL_ENTRY();
    __shared__ float gate;
    int s = blockIdx.x, t = blockIdx.y;
    i64 base = (i64)t * S * H + (i64)s * H;
    if (threadIdx.x == 0) {
        float dot = 0;
        for (int i = 0; i < H; i++) dot = __fadd_rn(dot, __fmul_rn(kn[base + i], qn[base + i]));
        float g = __fdiv_rn(dot, sqrtH);
        float r = 0;
        if (g > 0) r = (float)sqrt((double)fmaxf(g, 1e-6f));
        else if (g < 0) r = -(float)sqrt((double)fmaxf(-g, 1e-6f));
        gate = sigmoid64(r);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < H; i += blockDim.x) u[base + i] = __fmul_rn(gate, v[(i64)t * H + i]);
}

// q38_ple_conv: the PLE's depthwise conv with dilation N over the normed
// gated value un [T, C] (C = S·H), silu, plus u, added to R (qwen38
// dilatedConv then pleBlock's z += u and blocks.AddTo). Tap j of token t
// reads un N·(Kp−1−j) tokens back, from state [(Kp−1)·N, C] before the
// chunk, which keeps the last (Kp−1)·N inputs after it. A thread per
// channel; taps in order from zero, as blocks.ConvTaps. Bitwise.
extern "C" __global__ void q38_ple_conv(float* R, const float* u, const float* un, float* state, const float* w, int C, int Kp, int N, int T) {
    PDL_ENTRY();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int L = (Kp - 1) * N;
    for (int t = 0; t < T; t++) {
        float acc = 0;
        for (int j = 0; j < Kp; j++) {
            int src = t - N * (Kp - 1 - j);
            float x = src >= 0 ? un[(i64)src * C + c] : state[(i64)(L + src) * C + c];
            acc = __fadd_rn(acc, __fmul_rn(w[c * Kp + j], x));
        }
        float z = __fmul_rn(acc, sigk(acc));
        z = __fadd_rn(z, u[(i64)t * C + c]);
        R[(i64)t * C + c] = __fadd_rn(R[(i64)t * C + c], z);
    }
    for (int r = 0; r < L; r++) { // ascending: a row is read before it is overwritten
        int src = T - L + r;
        state[(i64)r * C + c] = src >= 0 ? un[(i64)src * C + c] : state[(i64)(L + src) * C + c];
    }
}

// q38_gdn_heads is gpukernels' gdn_heads with the qwen38 output gate:
// o = w·(o·inv)·sigmoid(z) (blocks.GatedNormSigmoid: kernels.Sigmoid) in
// place of silu(z). Everything else is gdn_heads' arithmetic.
extern "C" __global__ void q38_gdn_heads(float* o, float* S, const float* conv, const float* z, const float* a, const float* b,
                                         const float* negExpA, const float* dtBias, const float* normW,
                                         int C, int Hk, int Hv, int Dk, int Dv, float eps, int T, int abStride) {
    PDL_ENTRY();
    extern __shared__ float smem[];
    float* q = smem;    // [Dk]
    float* k = q + Dk;  // [Dk]
    float* ov = k + Dk; // [Dv]
    float* Ss = ov + Dv; // [Dk, Dv]
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
        if (threadIdx.x == 0) {
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
            for (int i = 0; i < Dk; i++) p = __fadd_rn(p, __fmul_rn(__fmul_rn(Ss[i * Dv + j], decay), k[i]));
            float delta = __fmul_rn(__fsub_rn(row[2 * kd + h * Dv + j], p), beta);
            float out = 0;
            for (int i = 0; i < Dk; i++) {
                float sv = __fadd_rn(__fmul_rn(Ss[i * Dv + j], decay), __fmul_rn(k[i], delta));
                Ss[i * Dv + j] = sv;
                out = __fadd_rn(out, __fmul_rn(sv, q[i]));
            }
            ov[j] = out;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double ss = 0;
            for (int i = 0; i < Dv; i++) ss += (double)ov[i] * (double)ov[i];
            float mean = (float)(ss / (double)Dv);
            gate[0] = (float)(1.0 / sqrt((double)__fadd_rn(mean, eps)));
        }
        __syncthreads();
        if (j < Dv) {
            float zz = z[(i64)t * vd + h * Dv + j];
            o[(i64)t * vd + h * Dv + j] = __fmul_rn(__fmul_rn(normW[j], __fmul_rn(ov[j], gate[0])), sigk(zz));
        }
        __syncthreads();
    }
    __syncthreads();
    stage(Sh, Ss, Dk * Dv);
}

// q38_gdn_norm is gpukernels' gdn_norm (without quantization) with the
// sigmoid gate: o = w·(oraw·inv)·sigmoid(z) per value head (block (h, t)),
// after gdn_rec's raw outputs.
extern "C" __global__ void q38_gdn_norm(float* o, const float* oraw, const float* z, const float* normW, int Hv, int Dv, float eps) {
    PDL_ENTRY();
    __shared__ float inv;
    int h = blockIdx.x, t = blockIdx.y, vd = Hv * Dv;
    i64 base = (i64)t * vd + (i64)h * Dv;
    if (threadIdx.x == 0) {
        double ss = 0;
        for (int i = 0; i < Dv; i++) ss += (double)oraw[base + i] * (double)oraw[base + i];
        float mean = (float)(ss / (double)Dv);
        inv = (float)(1.0 / sqrt((double)__fadd_rn(mean, eps)));
    }
    __syncthreads();
    for (int i = threadIdx.x; i < Dv; i += blockDim.x)
        o[base + i] = __fmul_rn(__fmul_rn(normW[i], __fmul_rn(oraw[base + i], inv)), sigk(z[base + i]));
}

// ---------------------------------------------------------------------------
// The QSA indexer (qwen38 attention.go). Its sums run in index order on one
// thread, as the Go loops do, so the block keys, the scores and hence the
// selection are those of the CPU engine given the same projections.

// q38_norm_rotate_seq is blocks.RMSNorm (float64 sum of squares in index
// order) then blocks.Rotate with Rope.Tables at position p, over one
// vector of n by the whole block (thread 0 sums). dst may alias x.
__device__ void q38_norm_rotate_seq(float* dst, const float* x, const float* scale, int n, float eps, const float* invFreq,
                                    int half, int p, float* inv) {
    if (threadIdx.x == 0) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
        float mean = (float)(ss / (double)n);
        *inv = (float)(1.0 / sqrt((double)__fadd_rn(mean, eps)));
    }
    __syncthreads();
    float iv = *inv;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = __fmul_rn(__fmul_rn(x[i], iv), scale[i]);
    __syncthreads();
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        float angle = __fmul_rn((float)p, invFreq[j]);
        float c = (float)cos((double)angle), s = (float)sin((double)angle);
        float x0 = dst[j], x1 = dst[j + half];
        dst[j] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        dst[j + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    }
    __syncthreads();
}

// The indexer kernels read the pass's first position pos from device memory
// (*dpos, as the attention kernels do), so a decode step's launches are the
// same at every position and replay as one CUDA graph.

// q38_idx_kraw: token t's raw indexer key (the last dih values of its
// index_qk_proj row qk [T, qkw]) is cached at row pos+t of kraw [cap, dih].
extern "C" __global__ void q38_idx_kraw(float* kraw, const float* qk, int qkw, int dih, const int* dpos) {
    PDL_ENTRY();
    int t = blockIdx.x, pos = *dpos;
    for (int i = threadIdx.x; i < dih; i += blockDim.x) kraw[(i64)(pos + t) * dih + i] = qk[(i64)t * qkw + qkw - dih + i];
}

// q38_idx_blocks: block key b = pos/cr + blockIdx.x, for the blocks a pass
// of T tokens from pos completes (b < (pos+T)/cr; the grid is an upper
// bound, T/cr + 1, and blocks past the last return) (qwen38
// completeBlocks): the mean of its cr raw keys (summed in position order,
// then divided), the indexer's k_layernorm, RoPE at the block's first
// position. A thread per dimension sums; the norm's sum is thread 0's.
extern "C" __global__ void q38_idx_blocks(float* kb, const float* kraw, const float* kNorm, const float* invFreq, int dih, int half,
                                          int cr, const int* dpos, int T, float eps) {
    PDL_ENTRY();
    extern __shared__ float mean[]; // [dih]
    __shared__ float inv;
    int pos = *dpos, b = pos / cr + blockIdx.x;
    if (b >= (pos + T) / cr) return;
    for (int i = threadIdx.x; i < dih; i += blockDim.x) {
        float m = 0;
        for (int tau = b * cr; tau < (b + 1) * cr; tau++) m = __fadd_rn(m, kraw[(i64)tau * dih + i]);
        mean[i] = __fdiv_rn(m, (float)cr);
    }
    __syncthreads();
    q38_norm_rotate_seq(mean, mean, kNorm, dih, eps, invFreq, half, b * cr, &inv);
    for (int i = threadIdx.x; i < dih; i += blockDim.x) kb[(i64)b * dih + i] = mean[i];
}

// q38_idx_scores: for token t at position p = pos+t, with nb = (p+1)/cr
// complete blocks, the block scores s_b = Σ_h relu(qi_h·kb_b)/sqrt(dih)
// (qwen38 selectKeys), written to scores [T, nbMax]; qi_h is the h-th
// indexer query after q_layernorm and RoPE at p. Tokens in the dense
// window (nb ≤ B) are skipped. A thread per block, heads in order, each
// dot in index order.
extern "C" __global__ void q38_idx_scores(float* scores, const float* qk, const float* qNorm, const float* kb, const float* invFreq,
                                          int qkw, int nih, int dih, int half, int cr, int B, int nbMax, const int* dpos, float eps, float scale) {
    PDL_ENTRY();
    extern __shared__ float qi[]; // [nih, dih]
    __shared__ float inv;
    int t = blockIdx.x, p = *dpos + t, nb = (p + 1) / cr;
    if (nb <= B) return;
    for (int h = 0; h < nih; h++)
        q38_norm_rotate_seq(qi + h * dih, qk + (i64)t * qkw + h * dih, qNorm, dih, eps, invFreq, half, p, &inv);
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        const float* k = kb + (i64)b * dih;
        float s = 0;
        for (int h = 0; h < nih; h++) {
            float d = 0;
            for (int i = 0; i < dih; i++) d = __fadd_rn(d, __fmul_rn(qi[h * dih + i], k[i]));
            s = __fadd_rn(s, fmaxf(0.0f, d));
        }
        scores[(i64)t * nbMax + b] = __fdiv_rn(s, scale);
    }
}

// q38_idx_select: token t keeps block b when fewer than B blocks rank
// before it in the order (−score, index), the set qwen38 topBlocks takes
// (the lower block first among equal scores): keep [T, nbMax] gets 1 or 0.
// Tokens in the dense window are skipped (every block kept).
extern "C" __global__ void q38_idx_select(unsigned char* keep, const float* scores, int cr, int B, int nbMax, const int* dpos) {
    PDL_ENTRY();
    int t = blockIdx.x, p = *dpos + t, nb = (p + 1) / cr;
    if (nb <= B) return;
    const float* s = scores + (i64)t * nbMax;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        float sb = s[b];
        int rank = 0;
        for (int c = 0; c < nb && rank < B; c++) {
            float sc = s[c];
            if (sc > sb || (sc == sb && c < b)) rank++;
        }
        keep[(i64)t * nbMax + b] = rank < B ? 1 : 0;
    }
}

// q38_qsa_mask: past the dense window, the attention scores [T, Hq, cap]
// of positions in blocks token t does not keep become −inf, so the softmax
// of attn_values weighs them e^−87 (exp32k's floor) times its 1/Σ: below
// float32 resolution of any sum the kept keys make. The tail (positions
// from cr·nb) is always kept. Block (h, t).
extern "C" __global__ void q38_qsa_mask(float* scores, const unsigned char* keep, int Hq, int cap, int cr, int B, int nbMax, const int* dpos) {
    PDL_ENTRY();
    int h = blockIdx.x, t = blockIdx.y, p = *dpos + t, nb = (p + 1) / cr;
    if (nb <= B) return;
    float* sc = scores + ((i64)t * Hq + h) * cap;
    const unsigned char* k = keep + (i64)t * nbMax;
    for (int s = threadIdx.x; s < nb * cr; s += blockDim.x)
        if (!k[s / cr]) sc[s] = -__int_as_float(0x7f800000);
}

// q38_zero: x = 0 over n values (ordered on the stream, unlike a memset).
extern "C" __global__ void q38_zero(float* x, int n) {
    PDL_ENTRY();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 0;
}
