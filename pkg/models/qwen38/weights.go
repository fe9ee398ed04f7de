package qwen38

import "github.com/nvmai/nvmai/pkg/models/blocks"

// loader is blocks.Loader with the tensors only qwen38 has.
type loader struct{ blocks.Loader }

// gatedResidual loads prefix{hc_norm, input_mix_weight_down,
// input_mix_weight_up[, block_inject_weight]}.
func (l *loader) gatedResidual(prefix string, c Config, inject bool) gatedResidual {
	SH, r := c.StreamWidth(), c.LowRank
	g := gatedResidual{
		norm: l.Norm(prefix+"hc_norm.weight", SH),
		down: l.Matrix(prefix+"input_mix_weight_down.weight", r, SH),
		up:   l.Matrix(prefix+"input_mix_weight_up.weight", SH, r),
	}
	if inject {
		g.inject = l.Matrix(prefix+"block_inject_weight.weight", c.Streams, SH)
	}
	return g
}

func (l *loader) layer(m *Model, i int, kind LayerKind) layer {
	c, prefix := &m.cfg, blocks.LayerPrefix(i)
	H := c.HiddenSize
	ly := layer{
		kind:   kind,
		attnHC: l.gatedResidual(prefix+"attn_hyper_connection.", *c, true),
		mlpHC:  l.gatedResidual(prefix+"mlp_hyper_connection.", *c, true),
	}
	switch kind {
	case LinearAttention:
		ly.gdn = l.GDN(prefix, &m.gdn, H)
	case SparseAttention:
		dih := c.IndexerDim
		ly.attn = &attnWeights{
			AttnWeights: l.Attention(prefix, H, c.NumHeads, c.HeadDim, c.kvDim()),
			index:       l.Matrix(prefix+"self_attn.indexer.index_qk_proj.weight", (c.IndexerHeads+1)*dih, H),
			iqNorm:      l.Norm(prefix+"self_attn.indexer.q_layernorm.weight", dih),
			ikNorm:      l.Norm(prefix+"self_attn.indexer.k_layernorm.weight", dih),
		}
	}
	ly.moe = l.MoE(prefix, &m.moe, c.SharedIntermediate)
	return ly
}

// ple loads the PLE tensors of decoder layer i, the k-th PLE layer, and
// checks the stored hashing constants (when Weights has them) against the
// recomputation.
func (l *loader) ple(c Config, i, k int) *pleWeights {
	name := func(s string) string { return blocks.LayerPrefix(i) + "ple." + s }
	SH, Dp := c.StreamWidth(), c.PLEDim
	p := &pleWeights{
		index:     k,
		layer:     i,
		key:       l.Matrix(name("key_proj.weight"), SH, Dp),
		value:     l.Matrix(name("value_proj.weight"), c.HiddenSize, Dp),
		normKey:   l.Norm(name("norm_key.weight"), SH),
		normQuery: l.Norm(name("norm_query.weight"), SH),
		normCv:    l.Norm(name("norm_conv.weight"), SH),
		conv:      l.Vector(name("conv1d.weight"), SH*c.PLEConvKernel),
		consts:    newNgramConsts(c, k),
	}
	iw, ok := l.W.(Int64Weights)
	if !ok || l.Err != nil {
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
		if !l.W.Has(name(b.suffix)) {
			continue
		}
		got, err := iw.Int64s(name(b.suffix))
		if err == nil {
			err = p.consts.check(name(b.suffix), got, b.want)
		}
		if err != nil {
			l.Err = err
			return p
		}
	}
	return p
}
