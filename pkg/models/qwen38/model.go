// Package qwen38 is the forward pass of the Qwen3.8-Flash-Next text decoder
// (model_type qwen4_exp) exactly as docs/qwen38-architecture.md writes it:
// the qwen3_5_moe trunk (Gated DeltaNet, gated attention, routed and shared
// experts, from package blocks) inside a four-stream gated residual, one
// hashed n-gram (PLE) layer, and the QSA indexer in front of every
// attention layer. Float32 compute over weights in any kernels encoding,
// all state in float32.
//
// Determinism is the contract of qwen35: a Forward over a chunk gives
// logits bitwise equal to feeding the same tokens one at a time, whatever
// the kernels.Pool's thread count, because every per-token reduction runs
// the same code in the same order whatever the chunk, and work is split
// over threads only by whole rows, heads or channels.
package qwen38

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// Weights gives the resident tensors by canonical name (blocks.Weights):
// "model.layers.1.ple.key_proj.weight",
// "model.hyper_connection_mixer.hc_norm.weight", "lm_head.weight".
type Weights = blocks.Weights

// Int64Weights is implemented by Weights that also hold the PLE layers'
// int64 buffers (layer_multipliers, ngram_heads_vocab_sizes,
// ngram_heads_offsets); New then refuses values that differ from the
// config's formulas.
type Int64Weights interface {
	Int64s(name string) ([]int64, error)
}

// Model holds the resident weights; it is immutable after New.
type Model struct {
	cfg    Config
	pool   *kernels.Pool
	ngrams NgramTable

	embed, lmHead *kernels.Matrix
	mixer         gatedResidual // the final mixer
	layers        []layer
	ple           []*pleWeights // by rank among the PLE layers
	rope          blocks.Rope
	gdn           blocks.GDN
	moe           blocks.MoE
}

type layer struct {
	kind   LayerKind
	attnHC gatedResidual
	mlpHC  gatedResidual
	ple    *pleWeights // nil unless the layer carries PLE
	gdn    *blocks.GDNWeights
	attn   *attnWeights
	moe    blocks.MoEWeights
}

type attnWeights struct {
	blocks.AttnWeights
	index  *kernels.Matrix // index_qk_proj [(nih+1)·dih, H]
	iqNorm []float32       // indexer q_layernorm, 1 + w
	ikNorm []float32       // indexer k_layernorm, 1 + w
}

// New fetches every resident tensor from w and checks it against cfg. ex
// serves the routed experts, ngrams the PLE tables (needed when cfg has PLE
// layers). pool may be nil.
func New(cfg Config, w Weights, ex model.Experts, ngrams NgramTable, pool *kernels.Pool) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case w == nil:
		return nil, fmt.Errorf("qwen38: no weights")
	case ex == nil:
		return nil, fmt.Errorf("qwen38: no routed experts")
	case len(cfg.PLELayers) > 0 && ngrams == nil:
		return nil, fmt.Errorf("qwen38: the config has PLE layers %v but no n-gram table was given", cfg.PLELayers)
	}
	m := &Model{cfg: cfg, pool: pool, ngrams: ngrams}
	m.gdn = blocks.GDN{Pool: pool, KeyHeads: cfg.LinearKeyHeads, ValueHeads: cfg.LinearValueHeads,
		KeyDim: cfg.LinearKeyDim, ValueDim: cfg.LinearValueDim, Kernel: cfg.ConvKernel,
		Eps: cfg.RMSNormEps, SigmoidGate: cfg.SigmoidGate}
	m.moe = blocks.MoE{Name: "qwen38", Pool: pool, Experts: ex, NumExperts: cfg.NumExperts,
		TopK: cfg.ExpertsPerToken, Hidden: cfg.HiddenSize, Intermediate: cfg.ExpertIntermediate}
	ld := &loader{blocks.Loader{Arch: "qwen38", W: w}}
	V, H := cfg.VocabSize, cfg.HiddenSize
	m.embed = ld.Matrix("model.embed_tokens.weight", V, H)
	m.lmHead = ld.Matrix("lm_head.weight", V, H)
	m.mixer = ld.gatedResidual("model.hyper_connection_mixer.", cfg, false)
	m.layers = make([]layer, len(cfg.Layers))
	for i, kind := range cfg.Layers {
		m.layers[i] = ld.layer(m, i, kind)
	}
	for k, l := range cfg.PLELayers {
		p := ld.ple(cfg, l, k)
		m.layers[l].ple = p
		m.ple = append(m.ple, p)
	}
	if ld.Err != nil {
		return nil, ld.Err
	}
	m.rope = blocks.NewRope(cfg.RopeTheta, cfg.RotaryDim)
	return m, nil
}

// Config returns the geometry the model was built with.
func (m *Model) Config() Config { return m.cfg }
