package qwen38

import (
	"fmt"
	"math"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// pleWeights are one PLE layer's tensors (§2.4) and hashing constants.
type pleWeights struct {
	index                      int             // rank among the PLE layers (the k of §3.4)
	layer                      int             // the decoder layer it runs before
	key                        *kernels.Matrix // key_proj [S·H, Dp]
	value                      *kernels.Matrix // value_proj [H, Dp]
	normKey, normQuery, normCv []float32       // 1 + w, [S·H] each
	conv                       []float32       // conv1d [S·H, Kp], dilation N
	consts                     ngramConsts
}

// pleState is a PLE layer's share of a sequence: the n-gram history and
// the last (Kp−1)·N normed conv inputs, oldest first.
type pleState struct {
	hist ngramHistory
	conv []float32 // [(Kp−1)·N, S·H]
}

// pleScratch holds the PLE block's per-chunk buffers.
type pleScratch struct {
	ids      []int64   // row ids [T, NH]
	emb      []float32 // concatenated rows [T, Dp]
	k, q, v  []float32 // GRMS(key_proj·emb) and GRMS(R) [T, S·H], value_proj·emb [T, H]
	u, un, z []float32 // gated value, its norm, the conv output [T, S·H]
}

// pleRows computes the chunk's row ids from the history in ps, advancing it.
func (m *Model) pleRows(p *pleWeights, ps *pleState, ids []int, dst []int64) []int64 {
	c := &m.cfg
	dst = dst[:0]
	for _, id := range ids {
		dst = p.consts.rowIDs(dst, ps.hist, id, c.EOS, c.HeadsPerNgram)
	}
	return dst
}

// pleBlock adds PLE(R, ids) = u + z to the residual R [T, S·H] (§3.4).
// rows are the chunk's row ids (pleRows).
func (m *Model) pleBlock(p *pleWeights, ps *pleState, sc *pleScratch, rows []int64, R []float32, T int, st *State) error {
	c := &m.cfg
	H, SH, Dp := c.HiddenSize, c.StreamWidth(), c.PLEDim
	emb := blocks.Grow(&sc.emb, T*Dp)
	if err := m.ngrams.Rows(p.index, rows, emb); err != nil {
		return fmt.Errorf("qwen38: PLE layer %d: reading n-gram rows: %w", p.index, err)
	}
	k, q, v := blocks.Grow(&sc.k, T*SH), blocks.Grow(&sc.q, T*SH), blocks.Grow(&sc.v, T*H)
	blocks.MatMulMulti(m.pool, [][]float32{k, v}, []*kernels.Matrix{p.key, p.value}, emb, T)
	groupedRMSNorm(k, k, p.normKey, H, SH, c.RMSNormEps)
	groupedRMSNorm(q, R[:T*SH], p.normQuery, H, SH, c.RMSNormEps)
	u := blocks.Grow(&sc.u, T*SH)
	sqrtH := float32(math.Sqrt(float64(H)))
	for t := range T {
		for s := 0; s < SH; s += H {
			var dot float32
			kt, qt := k[t*SH+s:t*SH+s+H], q[t*SH+s:t*SH+s+H]
			for i := range kt {
				dot += kt[i] * qt[i]
			}
			gate := blocks.Sigmoid32(signedSqrt(dot / sqrtH))
			ut, vt := u[t*SH+s:t*SH+s+H], v[t*H:(t+1)*H]
			for i := range ut {
				ut[i] = gate * vt[i]
			}
		}
	}
	un := blocks.Grow(&sc.un, T*SH)
	groupedRMSNorm(un, u, p.normCv, H, SH, c.RMSNormEps)
	z := blocks.Grow(&sc.z, T*SH)
	m.dilatedConv(p.conv, ps.conv, un, z, T)
	for i := range z[:T*SH] {
		z[i] += u[i]
	}
	st.observe(TapPLE, p.layer, z)
	blocks.AddTo(R[:T*SH], z)
	return nil
}

// signedSqrt is sign(g)·sqrt(max(|g|, 1e-6)), with sign(0) = 0.
func signedSqrt(g float32) float32 {
	switch {
	case g > 0:
		return float32(math.Sqrt(float64(max(g, 1e-6))))
	case g < 0:
		return -float32(math.Sqrt(float64(max(-g, 1e-6))))
	}
	return 0
}

// dilatedConv is the PLE's depthwise conv with silu: tap j of token t reads
// the normed input N·(Kp−1−j) tokens back (from state before the chunk),
// then state keeps the last (Kp−1)·N inputs. Channels are independent, so
// the pool's threads split them, as in blocks.CausalConv.
func (m *Model) dilatedConv(weight, state, x, dst []float32, T int) {
	c := &m.cfg
	C, Kp, N := c.StreamWidth(), c.PLEConvKernel, c.NgramSize
	L := (Kp - 1) * N
	source := func(s int) []float32 {
		if s >= 0 {
			return x[s*C : (s+1)*C]
		}
		r := L + s
		return state[r*C : (r+1)*C]
	}
	m.pool.Parallel(C, func(_, lo, hi int) {
		window := make([][]float32, Kp)
		for t := range T {
			for j := range Kp {
				window[j] = source(t - N*(Kp-1-j))[lo:hi]
			}
			d := dst[t*C+lo : t*C+hi]
			blocks.ConvTaps(d, weight[lo*Kp:hi*Kp], window)
			kernels.SiLU(d, d)
		}
	})
	// Ascending order reads every state row before it is overwritten.
	for r := range L {
		copy(state[r*C:(r+1)*C], source(T-L+r))
	}
}
