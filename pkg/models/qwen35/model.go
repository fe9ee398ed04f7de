// Package qwen35 is the forward pass of the Qwen3.5 text decoder, both the
// MoE (qwen3_5_moe) and the dense (qwen3_5) variant, exactly as
// docs/qwen35-architecture.md writes it: float32 compute over weights in any
// kernels encoding, Gated DeltaNet state in float32, every reduction in a
// fixed order.
//
// Determinism is a contract: a Forward over a chunk of tokens gives logits
// bitwise equal to feeding the same tokens one at a time, and the result
// does not depend on the kernels.Pool's thread count. Both follow from the
// kernels contract (MatMul rows are bitwise MatVec, whatever the split), from
// doing every per-token reduction here with the same code in the same order
// whatever the chunk, and from splitting attention and Gated DeltaNet work
// over the pool's threads only by whole heads (and the causal conv by whole
// channels).
package qwen35

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// Model holds the resident weights. It is immutable after New (but for
// ForwardBatch's scratch, which its calls take in turn), so several States
// may run on it concurrently if the pool and Experts allow it.
type Model struct {
	cfg     Config
	pool    *kernels.Pool
	experts model.Experts

	embed  *kernels.Matrix
	lmHead *kernels.Matrix
	norm   []float32 // 1 + w

	layers []layer
	rope   blocks.Rope
	moe    blocks.MoE // runs every layer's MoE block over experts
	gdn    blocks.GDN // runs every Gated DeltaNet layer

	batch *batchScratch // ForwardBatch's scratch, the one mutable part (behind its mutex)
}

type layer struct {
	kind      LayerKind
	inputNorm []float32 // 1 + w
	postNorm  []float32 // 1 + w
	gdn       *blocks.GDNWeights
	attn      *blocks.AttnWeights
	moe       *blocks.MoEWeights
	mlp       *blocks.MLPWeights
}

// New fetches every resident tensor from w and checks it against cfg, so a
// mismatched install fails here, naming the tensor, not in the middle of a
// generation. ex serves routed experts and must be non-nil for ArchMoE.
// pool may be nil (single-threaded kernels).
func New(cfg Config, w Weights, ex model.Experts, pool *kernels.Pool) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if w == nil {
		return nil, fmt.Errorf("qwen35: no weights")
	}
	if cfg.Arch == ArchMoE && ex == nil {
		return nil, fmt.Errorf("qwen35: architecture %s needs routed experts, got none", cfg.Arch)
	}
	m := &Model{cfg: cfg, pool: pool, experts: ex, batch: new(batchScratch)}
	m.gdn = blocks.GDN{Pool: pool, KeyHeads: cfg.LinearKeyHeads, ValueHeads: cfg.LinearValueHeads,
		KeyDim: cfg.LinearKeyDim, ValueDim: cfg.LinearValueDim, Kernel: cfg.ConvKernel, Eps: cfg.RMSNormEps}
	m.moe = blocks.MoE{Name: "qwen35", Pool: pool, Experts: ex, NumExperts: cfg.NumExperts,
		TopK: cfg.ExpertsPerToken, Hidden: cfg.HiddenSize, Intermediate: cfg.ExpertIntermediate}
	ld := &blocks.Loader{Arch: "qwen35", W: w}
	V, H := cfg.VocabSize, cfg.HiddenSize
	m.embed = ld.Matrix(nameEmbed, V, H)
	m.norm = ld.Norm(nameNorm, H)
	switch {
	case w.Has(nameLMHead):
		m.lmHead = ld.Matrix(nameLMHead, V, H)
	case cfg.TiedEmbeddings:
		m.lmHead = m.embed
	default:
		if ld.Err == nil {
			ld.Err = fmt.Errorf("qwen35: tensor %s is missing and tie_word_embeddings is false; the install is incomplete", nameLMHead)
		}
	}
	m.layers = make([]layer, len(cfg.Layers))
	for i, kind := range cfg.Layers {
		m.layers[i] = m.loadLayer(ld, i, kind)
	}
	if ld.Err != nil {
		return nil, ld.Err
	}
	m.rope = newRope(cfg.RopeTheta, cfg.RotaryDim, cfg.RopeScaling)
	return m, nil
}

func (m *Model) loadLayer(ld *blocks.Loader, i int, kind LayerKind) layer {
	c, prefix := &m.cfg, blocks.LayerPrefix(i)
	H := c.HiddenSize
	ly := layer{
		kind:      kind,
		inputNorm: ld.Norm(prefix+"input_layernorm.weight", H),
		postNorm:  ld.Norm(prefix+"post_attention_layernorm.weight", H),
	}
	switch kind {
	case LinearAttention:
		ly.gdn = ld.GDN(prefix, &m.gdn, H)
	case FullAttention:
		a := ld.Attention(prefix, H, c.NumHeads, c.HeadDim, c.kvDim())
		ly.attn = &a
	}
	if c.Arch == ArchMoE {
		w := ld.MoE(prefix, &m.moe, c.SharedIntermediate)
		ly.moe = &w
	} else {
		I := c.Intermediate
		ly.mlp = &blocks.MLPWeights{
			Gate: ld.Matrix(prefix+"mlp.gate_proj.weight", I, H),
			Up:   ld.Matrix(prefix+"mlp.up_proj.weight", I, H),
			Down: ld.Matrix(prefix+"mlp.down_proj.weight", H, I),
		}
	}
	return ly
}

// Config returns the geometry the model was built with.
func (m *Model) Config() Config { return m.cfg }
