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
	"github.com/nvmai/nvmai/pkg/runtime/blocks"
)

// Model holds the resident weights. It is immutable after New, so several
// States may run on it concurrently if the pool and Experts allow it.
type Model struct {
	cfg     Config
	pool    *kernels.Pool
	experts Experts

	embed  *kernels.Matrix
	lmHead *kernels.Matrix
	norm   []float32 // 1 + w

	layers []layer
	rope   blocks.Rope
	moe    blocks.MoE // runs every layer's MoE block over experts
	gdn    blocks.GDN // runs every Gated DeltaNet layer
}

type layer struct {
	kind      LayerKind
	inputNorm []float32 // 1 + w
	postNorm  []float32 // 1 + w
	gdn       *blocks.GDNWeights
	attn      *attnWeights
	moe       *blocks.MoEWeights
	mlp       *blocks.MLPWeights
}

type attnWeights struct {
	q, k, v, o   *kernels.Matrix
	qNorm, kNorm []float32 // 1 + w
}

// New fetches every resident tensor from w and checks it against cfg, so a
// mismatched install fails here, naming the tensor, not in the middle of a
// generation. ex serves routed experts and must be non-nil for ArchMoE.
// pool may be nil (single-threaded kernels).
func New(cfg Config, w Weights, ex Experts, pool *kernels.Pool) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if w == nil {
		return nil, fmt.Errorf("qwen35: no weights")
	}
	if cfg.Arch == ArchMoE && ex == nil {
		return nil, fmt.Errorf("qwen35: architecture %s needs routed experts, got none", cfg.Arch)
	}
	m := &Model{cfg: cfg, pool: pool, experts: ex}
	ld := &loader{w: w}
	V, H := cfg.VocabSize, cfg.HiddenSize
	m.embed = ld.matrix(nameEmbed, V, H)
	m.norm = blocks.OnePlus(ld.vector(nameNorm, H))
	switch {
	case w.Has(nameLMHead):
		m.lmHead = ld.matrix(nameLMHead, V, H)
	case cfg.TiedEmbeddings:
		m.lmHead = m.embed
	default:
		if ld.err == nil {
			ld.err = fmt.Errorf("qwen35: tensor %s is missing and tie_word_embeddings is false; the install is incomplete", nameLMHead)
		}
	}
	m.layers = make([]layer, len(cfg.Layers))
	for i, kind := range cfg.Layers {
		m.layers[i] = loadLayer(ld, cfg, i, kind)
	}
	if ld.err != nil {
		return nil, ld.err
	}
	m.rope = newRope(cfg.RopeTheta, cfg.RotaryDim, cfg.RopeScaling)
	m.gdn = blocks.GDN{Pool: pool, KeyHeads: cfg.LinearKeyHeads, ValueHeads: cfg.LinearValueHeads,
		KeyDim: cfg.LinearKeyDim, ValueDim: cfg.LinearValueDim, Kernel: cfg.ConvKernel, Eps: cfg.RMSNormEps}
	m.moe = blocks.MoE{Name: "qwen35", Pool: pool, Experts: ex, NumExperts: cfg.NumExperts,
		TopK: cfg.ExpertsPerToken, Hidden: cfg.HiddenSize, Intermediate: cfg.ExpertIntermediate}
	return m, nil
}

func loadLayer(ld *loader, c Config, i int, kind LayerKind) layer {
	name := func(s string) string { return layerTensor(i, s) }
	H := c.HiddenSize
	ly := layer{
		kind:      kind,
		inputNorm: blocks.OnePlus(ld.vector(name("input_layernorm.weight"), H)),
		postNorm:  blocks.OnePlus(ld.vector(name("post_attention_layernorm.weight"), H)),
	}
	switch kind {
	case LinearAttention:
		C, Hv, vd := c.ConvChannels(), c.LinearValueHeads, c.valueDim()
		g := &blocks.GDNWeights{
			QKV:    ld.matrix(name("linear_attn.in_proj_qkv.weight"), C, H),
			Z:      ld.matrix(name("linear_attn.in_proj_z.weight"), vd, H),
			B:      ld.matrix(name("linear_attn.in_proj_b.weight"), Hv, H),
			A:      ld.matrix(name("linear_attn.in_proj_a.weight"), Hv, H),
			Conv:   ld.vector(name("linear_attn.conv1d.weight"), C*c.ConvKernel),
			DtBias: ld.vector(name("linear_attn.dt_bias"), Hv),
			Norm:   ld.vector(name("linear_attn.norm.weight"), c.LinearValueDim),
			Out:    ld.matrix(name("linear_attn.out_proj.weight"), H, vd),
		}
		if aLog := ld.vector(name("linear_attn.A_log"), Hv); aLog != nil {
			g.NegExpA = make([]float32, Hv)
			for h, v := range aLog {
				g.NegExpA[h] = -blocks.Exp32(v)
			}
		}
		ly.gdn = g
	case FullAttention:
		Dh := c.HeadDim
		ly.attn = &attnWeights{
			q:     ld.matrix(name("self_attn.q_proj.weight"), 2*c.NumHeads*Dh, H),
			k:     ld.matrix(name("self_attn.k_proj.weight"), c.kvDim(), H),
			v:     ld.matrix(name("self_attn.v_proj.weight"), c.kvDim(), H),
			o:     ld.matrix(name("self_attn.o_proj.weight"), H, c.NumHeads*Dh),
			qNorm: blocks.OnePlus(ld.vector(name("self_attn.q_norm.weight"), Dh)),
			kNorm: blocks.OnePlus(ld.vector(name("self_attn.k_norm.weight"), Dh)),
		}
	}
	if c.Arch == ArchMoE {
		Is := c.SharedIntermediate
		ly.moe = &blocks.MoEWeights{
			Router: ld.matrix(name("mlp.gate.weight"), c.NumExperts, H),
			Shared: blocks.MLPWeights{
				Gate: ld.matrix(name("mlp.shared_expert.gate_proj.weight"), Is, H),
				Up:   ld.matrix(name("mlp.shared_expert.up_proj.weight"), Is, H),
				Down: ld.matrix(name("mlp.shared_expert.down_proj.weight"), H, Is),
			},
			SharedGate: ld.matrix(name("mlp.shared_expert_gate.weight"), 1, H),
		}
	} else {
		I := c.Intermediate
		ly.mlp = &blocks.MLPWeights{
			Gate: ld.matrix(name("mlp.gate_proj.weight"), I, H),
			Up:   ld.matrix(name("mlp.up_proj.weight"), I, H),
			Down: ld.matrix(name("mlp.down_proj.weight"), H, I),
		}
	}
	return ly
}

// Config returns the geometry the model was built with.
func (m *Model) Config() Config { return m.cfg }
