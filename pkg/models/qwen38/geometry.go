package qwen38

import (
	"fmt"
	"math"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// ConfigFromGeometry converts the manifest geometry of a qwen4_exp install
// (docs/qwen38.md) and validates it.
func ConfigFromGeometry(g packexperts.Geometry) (Config, error) {
	q := g.Qwen4Exp
	if q == nil {
		return Config{}, fmt.Errorf("qwen38: the manifest geometry has no qwen4_exp section; reconvert the install with this nvmai")
	}
	switch {
	case g.HiddenAct != "silu":
		return Config{}, fmt.Errorf("qwen38: geometry hidden_act %q: only \"silu\" is supported", g.HiddenAct)
	case q.OutputGateType != "sigmoid" && q.OutputGateType != "silu":
		return Config{}, fmt.Errorf("qwen38: geometry output_gate_type %q: want \"sigmoid\" or \"silu\"", q.OutputGateType)
	case !q.NormTopKProb:
		return Config{}, fmt.Errorf("qwen38: geometry norm_topk_prob false is not supported (every published config renormalises)")
	case q.IndexerKVHeads != 1:
		return Config{}, fmt.Errorf("qwen38: geometry indexer_kv_heads %d: transformers 5.17 requires 1", q.IndexerKVHeads)
	case g.TieWordEmbeddings:
		return Config{}, fmt.Errorf("qwen38: geometry tie_word_embeddings true: qwen4_exp has its own lm_head")
	}
	prf := g.PartialRotaryFactor
	if prf == 0 {
		prf = 1 // the qwen4_exp default (docs/qwen38-architecture.md §1.3)
	}
	if !(prf > 0 && prf <= 1) || math.IsNaN(prf) {
		return Config{}, fmt.Errorf("qwen38: geometry partial_rotary_factor %v is outside (0, 1]", prf)
	}
	c := Config{
		VocabSize: g.VocabSize, HiddenSize: g.HiddenSize, RMSNormEps: float32(g.RMSNormEps),
		MaxContext: g.MaxPositionEmbeddings, Streams: q.HCCount, LowRank: q.HCLowRank,
		NumHeads: g.NumAttentionHeads, NumKVHeads: g.NumKeyValueHeads, HeadDim: g.HeadDim,
		RopeTheta: g.RopeTheta, RotaryDim: int(float64(g.HeadDim) * prf),
		IndexerHeads: q.IndexerNHeads, IndexerDim: q.IndexerHeadDim, IndexerBudget: q.IndexerBudget,
		IndexerBlock: q.IndexerCompressRatio, ConvKernel: g.LinearConvKernelDim,
		LinearKeyHeads: g.LinearNumKeyHeads, LinearValueHeads: g.LinearNumValueHeads,
		LinearKeyDim: g.LinearKeyHeadDim, LinearValueDim: g.LinearValueHeadDim,
		SigmoidGate: q.OutputGateType == "sigmoid", NumExperts: g.NumExperts, ExpertsPerToken: g.NumExpertsPerTok,
		ExpertIntermediate: g.MoeIntermediateSize, SharedIntermediate: g.SharedExpertIntermediateSize,
		PLELayers: append([]int(nil), q.PLELayers...), PLEDim: q.PLEEmbedDim, PLEConvKernel: q.PLEConvKernelSize,
		NgramSize: q.NGramSize, HeadsPerNgram: q.HeadsPerNGram, NgramVocabBase: q.NGramVocabSizeBase,
		NgramRowsDivide: q.NGramVocabSizeDivisibleBy, Seed: q.Seed, EOS: q.PLEResetTokenID,
	}
	if g.NumLayers <= 0 || len(g.LayerTypes) != g.NumLayers {
		return Config{}, fmt.Errorf("qwen38: geometry has %d layer_types for %d layers", len(g.LayerTypes), g.NumLayers)
	}
	for i, s := range g.LayerTypes {
		k, err := ParseLayerKind(s)
		if err != nil {
			return Config{}, fmt.Errorf("qwen38: geometry layer_types[%d]: %w", i, err)
		}
		c.Layers = append(c.Layers, k)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// NgramRows is R_tab, the row count of the k-th PLE layer's table as the
// config's formulas give it.
func (c Config) NgramRows(k int) int64 { return newNgramConsts(c, k).rows }
