package qwen38

import "testing"

// FuzzConfigValidate: whatever geometry a manifest holds, Validate either
// refuses it or the derived sizes and the hashing constants can be computed
// without a panic or an unbounded search.
func FuzzConfigValidate(f *testing.F) {
	f.Add(4, 2, 3, 8, int64(1000), int64(128), 64, 4, 8, 4, 1)
	f.Add(1, 0, 2, 0, int64(0), int64(0), 0, 0, 0, 0, 0)
	f.Fuzz(func(t *testing.T, streams, lowRank, ngram, heads int, base, div int64, dp, kp, budget, block, pleLayer int) {
		c := Config{VocabSize: 4160, HiddenSize: 8, Layers: []LayerKind{LinearAttention, SparseAttention}, RMSNormEps: 1e-6,
			MaxContext: 64, Streams: streams, LowRank: lowRank, NumHeads: 2, NumKVHeads: 1, HeadDim: 8, RopeTheta: 1e4,
			RotaryDim: 4, IndexerHeads: 2, IndexerDim: 4, IndexerBudget: budget, IndexerBlock: block, ConvKernel: 4,
			LinearKeyHeads: 1, LinearValueHeads: 2, LinearKeyDim: 4, LinearValueDim: 4, NumExperts: 4, ExpertsPerToken: 2,
			ExpertIntermediate: 4, SharedIntermediate: 4, PLELayers: []int{pleLayer}, PLEDim: dp, PLEConvKernel: kp,
			NgramSize: ngram, HeadsPerNgram: heads, NgramVocabBase: base, NgramRowsDivide: div, Seed: 1234, EOS: 4096}
		if c.Validate() != nil {
			return
		}
		if base > 1<<20 {
			return // valid, but a search this long is for the real configs, not a fuzzer
		}
		nc := newNgramConsts(c, 0)
		if nc.rows <= 0 || c.NgramRowWidth() <= 0 || c.IndexerBlocks() <= 0 || c.FixedStateBytes() <= 0 {
			t.Fatalf("valid config %+v derives rows %d, dr %d", c, nc.rows, c.NgramRowWidth())
		}
	})
}
