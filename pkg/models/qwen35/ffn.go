package qwen35

import (
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// mlpScratch holds the per-chunk buffers of the dense MLP.
type mlpScratch struct {
	gate, up []float32 // [T, I]
}

// denseMLP is y = W_down · (silu(W_gate x) ⊙ (W_up x)) for T rows.
func (m *Model) denseMLP(w *blocks.MLPWeights, sc *mlpScratch, u, out []float32, T int) {
	inter := w.Gate.Rows
	g := blocks.Grow(&sc.gate, T*inter)
	up := blocks.Grow(&sc.up, T*inter)
	blocks.MatMulMulti(m.pool, [][]float32{g, up}, []*kernels.Matrix{w.Gate, w.Up}, u, T)
	blocks.SwiGLU(g, up)
	blocks.MatMul(m.pool, out, w.Down, g, T)
}
