package qwen38

import (
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// gatedResidual holds one gated residual's weights (§3.3); inject is nil
// for the final mixer.
type gatedResidual struct {
	norm   []float32       // 1 + w, [S·H]: one RMSNorm weight per stream
	down   *kernels.Matrix // [r, S·H]
	up     *kernels.Matrix // [S·H, r]
	inject *kernels.Matrix // [S, S·H]
}

// residualScratch holds the read's per-chunk buffers.
type residualScratch struct {
	rn   []float32 // GRMS(R) [T, S·H]
	a    []float32 // [T, r]
	gate []float32 // read gates [T, S·H]
	c    []float32 // write gates [T, S]
}

// groupedRMSNorm normalises each H-wide stream of every row of x [T, S·H]
// on its own, with its own slice of scale.
func groupedRMSNorm(dst, x, scale []float32, H, SH int, eps float32) {
	for r := 0; r+SH <= len(x); r += SH {
		for s := 0; s < SH; s += H {
			blocks.RMSNorm(dst[r+s:r+s+H], x[r+s:r+s+H], scale[s:s+H], eps)
		}
	}
}

// read computes the sublayer input x [T, H] from the residual R [T, S·H],
// and, unless g is the final mixer, the write gates c [T, S] (left in
// sc.c): Rn = GRMS(R); a = silu(W_down·Rn / S); m = sigmoid(W_up·a);
// x = (1/S)·Σ_s m_s ⊙ Rn_s; c = 2·sigmoid(W_inj·Rn / S).
func (m *Model) read(g *gatedResidual, sc *residualScratch, R, x []float32, T int) {
	c := &m.cfg
	H, S, SH, r := c.HiddenSize, c.Streams, c.StreamWidth(), c.LowRank
	rn := blocks.Grow(&sc.rn, T*SH)
	groupedRMSNorm(rn, R[:T*SH], g.norm, H, SH, c.RMSNormEps)
	a := blocks.Grow(&sc.a, T*r)
	fS := float32(S)
	if g.inject != nil {
		cg := blocks.Grow(&sc.c, T*S)
		blocks.MatMulMulti(m.pool, [][]float32{a, cg}, []*kernels.Matrix{g.down, g.inject}, rn, T)
		for i, v := range cg {
			cg[i] = 2 * blocks.Sigmoid32(v/fS)
		}
	} else {
		blocks.MatMul(m.pool, a, g.down, rn, T)
	}
	for i, v := range a {
		a[i] = v / fS
	}
	kernels.SiLU(a, a)
	gate := blocks.Grow(&sc.gate, T*SH)
	blocks.MatMul(m.pool, gate, g.up, a, T)
	kernels.Sigmoid(gate, gate)
	for t := range T {
		xt := x[t*H : (t+1)*H]
		gt, rt := gate[t*SH:(t+1)*SH], rn[t*SH:(t+1)*SH]
		for i := range xt {
			var acc float32
			for s := 0; s < SH; s += H {
				acc += gt[s+i] * rt[s+i]
			}
			xt[i] = acc / fS
		}
	}
}

// write adds c ⊗ y to the residual: stream s of token t gets c[t,s]·y_t.
func (m *Model) write(R, c, y []float32, T int) {
	H, S := m.cfg.HiddenSize, m.cfg.Streams
	SH := S * H
	for t := range T {
		yt := y[t*H : (t+1)*H]
		for s := range S {
			cs := c[t*S+s]
			rs := R[t*SH+s*H : t*SH+(s+1)*H]
			for i, v := range yt {
				rs[i] += cs * v
			}
		}
	}
}
