package qwen38

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/runtime/blocks"
)

func layerTensor(layer int, suffix string) string {
	return fmt.Sprintf("model.layers.%d.%s", layer, suffix)
}

// loader fetches tensors and checks their shapes, remembering the first
// error so New reads every tensor in a straight line.
type loader struct {
	w   Weights
	err error
}

func (l *loader) matrix(name string, rows, cols int) *kernels.Matrix {
	if l.err != nil {
		return nil
	}
	m, err := l.w.Matrix(name)
	if err == nil {
		err = blocks.CheckMatrix(m, rows, cols)
	}
	if err != nil {
		l.err = fmt.Errorf("qwen38: tensor %s: %w", name, err)
		return nil
	}
	return m
}

func (l *loader) vector(name string, n int) []float32 {
	if l.err != nil {
		return nil
	}
	v, err := l.w.Vector(name)
	if err != nil {
		l.err = fmt.Errorf("qwen38: tensor %s: %w", name, err)
		return nil
	}
	if len(v) != n {
		l.err = fmt.Errorf("qwen38: tensor %s has %d values, the geometry needs %d; the install does not match its geometry", name, len(v), n)
		return nil
	}
	return v
}

// gatedResidual loads prefix{hc_norm, input_mix_weight_down,
// input_mix_weight_up[, block_inject_weight]}.
func (l *loader) gatedResidual(prefix string, c Config, inject bool) gatedResidual {
	SH, r := c.StreamWidth(), c.LowRank
	g := gatedResidual{
		norm: blocks.OnePlus(l.vector(prefix+"hc_norm.weight", SH)),
		down: l.matrix(prefix+"input_mix_weight_down.weight", r, SH),
		up:   l.matrix(prefix+"input_mix_weight_up.weight", SH, r),
	}
	if inject {
		g.inject = l.matrix(prefix+"block_inject_weight.weight", c.Streams, SH)
	}
	return g
}

func (l *loader) layer(c Config, i int, kind LayerKind) layer {
	name := func(s string) string { return layerTensor(i, s) }
	H := c.HiddenSize
	ly := layer{
		kind:   kind,
		attnHC: l.gatedResidual(name("attn_hyper_connection."), c, true),
		mlpHC:  l.gatedResidual(name("mlp_hyper_connection."), c, true),
	}
	switch kind {
	case LinearAttention:
		C, Hv, vd := c.ConvChannels(), c.LinearValueHeads, c.valueDim()
		g := &blocks.GDNWeights{
			QKV:    l.matrix(name("linear_attn.in_proj_qkv.weight"), C, H),
			Z:      l.matrix(name("linear_attn.in_proj_z.weight"), vd, H),
			B:      l.matrix(name("linear_attn.in_proj_b.weight"), Hv, H),
			A:      l.matrix(name("linear_attn.in_proj_a.weight"), Hv, H),
			Conv:   l.vector(name("linear_attn.conv1d.weight"), C*c.ConvKernel),
			DtBias: l.vector(name("linear_attn.dt_bias"), Hv),
			Norm:   l.vector(name("linear_attn.norm.weight"), c.LinearValueDim),
			Out:    l.matrix(name("linear_attn.out_proj.weight"), H, vd),
		}
		if aLog := l.vector(name("linear_attn.A_log"), Hv); aLog != nil {
			g.NegExpA = make([]float32, Hv)
			for h, v := range aLog {
				g.NegExpA[h] = -blocks.Exp32(v)
			}
		}
		ly.gdn = g
	case SparseAttention:
		Dh, dih := c.HeadDim, c.IndexerDim
		ly.attn = &attnWeights{
			q:      l.matrix(name("self_attn.q_proj.weight"), 2*c.NumHeads*Dh, H),
			k:      l.matrix(name("self_attn.k_proj.weight"), c.kvDim(), H),
			v:      l.matrix(name("self_attn.v_proj.weight"), c.kvDim(), H),
			o:      l.matrix(name("self_attn.o_proj.weight"), H, c.NumHeads*Dh),
			qNorm:  blocks.OnePlus(l.vector(name("self_attn.q_norm.weight"), Dh)),
			kNorm:  blocks.OnePlus(l.vector(name("self_attn.k_norm.weight"), Dh)),
			index:  l.matrix(name("self_attn.indexer.index_qk_proj.weight"), (c.IndexerHeads+1)*dih, H),
			iqNorm: blocks.OnePlus(l.vector(name("self_attn.indexer.q_layernorm.weight"), dih)),
			ikNorm: blocks.OnePlus(l.vector(name("self_attn.indexer.k_layernorm.weight"), dih)),
		}
	}
	Is := c.SharedIntermediate
	ly.moe = blocks.MoEWeights{
		Router: l.matrix(name("mlp.gate.weight"), c.NumExperts, H),
		Shared: blocks.MLPWeights{
			Gate: l.matrix(name("mlp.shared_expert.gate_proj.weight"), Is, H),
			Up:   l.matrix(name("mlp.shared_expert.up_proj.weight"), Is, H),
			Down: l.matrix(name("mlp.shared_expert.down_proj.weight"), H, Is),
		},
		SharedGate: l.matrix(name("mlp.shared_expert_gate.weight"), 1, H),
	}
	return ly
}

// ple loads the PLE tensors of decoder layer i, the k-th PLE layer, and
// checks the stored hashing constants (when Weights has them) against the
// recomputation.
func (l *loader) ple(c Config, i, k int) *pleWeights {
	name := func(s string) string { return layerTensor(i, "ple."+s) }
	SH, Dp := c.StreamWidth(), c.PLEDim
	p := &pleWeights{
		index:     k,
		layer:     i,
		key:       l.matrix(name("key_proj.weight"), SH, Dp),
		value:     l.matrix(name("value_proj.weight"), c.HiddenSize, Dp),
		normKey:   blocks.OnePlus(l.vector(name("norm_key.weight"), SH)),
		normQuery: blocks.OnePlus(l.vector(name("norm_query.weight"), SH)),
		normCv:    blocks.OnePlus(l.vector(name("norm_conv.weight"), SH)),
		conv:      l.vector(name("conv1d.weight"), SH*c.PLEConvKernel),
		consts:    newNgramConsts(c, k),
	}
	iw, ok := l.w.(Int64Weights)
	if !ok || l.err != nil {
		return p
	}
	for _, b := range []struct {
		suffix string
		want   []int64
	}{
		{"ple_embedding.layer_multipliers", p.consts.mult},
		{"ple_embedding.ngram_heads_vocab_sizes", p.consts.primes},
		{"ple_embedding.ngram_heads_offsets", p.consts.offsets},
	} {
		if !l.w.Has(name(b.suffix)) {
			continue
		}
		got, err := iw.Int64s(name(b.suffix))
		if err == nil {
			err = p.consts.check(name(b.suffix), got, b.want)
		}
		if err != nil {
			l.err = err
			return p
		}
	}
	return p
}
