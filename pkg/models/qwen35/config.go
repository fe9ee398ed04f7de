package qwen35

import (
	"fmt"
	"math"

	"github.com/nvmai/nvmai/pkg/models/blocks"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Architecture names as written in an install manifest.
const (
	ArchMoE   = "qwen3_5_moe" // routed experts plus a shared expert in every layer
	ArchDense = "qwen3_5"     // a dense SwiGLU MLP in every layer
)

// LayerKind is the token mixer of one decoder layer.
type LayerKind uint8

const (
	LinearAttention LayerKind = iota // Gated DeltaNet: fixed-size recurrent state
	FullAttention                    // gated softmax attention over a growing KV cache
)

func (k LayerKind) String() string {
	return blocks.KindName(uint8(k), "linear_attention", "full_attention")
}

// Defaults transformers applies when config.json leaves a field out
// (docs/qwen35-architecture.md §1.2).
const (
	defaultPartialRotaryFactor   = 0.25
	defaultFullAttentionInterval = 4
)

// Config is the text decoder's geometry in the form the forward pass uses.
// Build it with ConfigFromGeometry; Validate says whether New can use it.
type Config struct {
	Arch       string // ArchMoE or ArchDense
	VocabSize  int    // V: rows of the embedding and of lm_head
	HiddenSize int    // H: residual width
	Layers     []LayerKind
	RMSNormEps float32
	MaxContext int // max_position_embeddings: the default State.MaxContext

	// Full attention.
	NumHeads   int     // Hq
	NumKVHeads int     // Hkv
	HeadDim    int     // Dh
	RopeTheta  float64 // θ
	RotaryDim  int     // rd: leading dims of each head that RoPE rotates
	// RopeScaling extends the context past the trained one (YaRN); the
	// zero value is plain RoPE.
	RopeScaling RopeScaling

	// Gated DeltaNet.
	ConvKernel       int // K
	LinearKeyHeads   int // Hk
	LinearValueHeads int // Hv
	LinearKeyDim     int // Dk
	LinearValueDim   int // Dv

	// Dense MLP (ArchDense).
	Intermediate int

	// MoE block (ArchMoE).
	NumExperts         int // E
	ExpertsPerToken    int // k
	ExpertIntermediate int // I
	SharedIntermediate int // Is

	TiedEmbeddings bool // lm_head is the embedding matrix when lm_head.weight is absent
}

// ConfigFromGeometry converts the manifest geometry of an install of
// architecture arch and validates the result.
func ConfigFromGeometry(arch string, g packexperts.Geometry) (Config, error) {
	prf := g.PartialRotaryFactor
	if prf == 0 {
		prf = defaultPartialRotaryFactor
	}
	c := Config{
		Arch:               arch,
		VocabSize:          g.VocabSize,
		HiddenSize:         g.HiddenSize,
		RMSNormEps:         float32(g.RMSNormEps),
		MaxContext:         g.MaxPositionEmbeddings,
		NumHeads:           g.NumAttentionHeads,
		NumKVHeads:         g.NumKeyValueHeads,
		HeadDim:            g.HeadDim,
		RopeTheta:          g.RopeTheta,
		RotaryDim:          int(float64(g.HeadDim) * prf),
		ConvKernel:         g.LinearConvKernelDim,
		LinearKeyHeads:     g.LinearNumKeyHeads,
		LinearValueHeads:   g.LinearNumValueHeads,
		LinearKeyDim:       g.LinearKeyHeadDim,
		LinearValueDim:     g.LinearValueHeadDim,
		Intermediate:       g.IntermediateSize,
		NumExperts:         g.NumExperts,
		ExpertsPerToken:    g.NumExpertsPerTok,
		ExpertIntermediate: g.MoeIntermediateSize,
		SharedIntermediate: g.SharedExpertIntermediateSize,
		TiedEmbeddings:     g.TieWordEmbeddings,
	}
	if g.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("qwen35: geometry hidden_act %q: only \"silu\" is supported", g.HiddenAct)
	}
	if prf < 0 || prf > 1 || math.IsNaN(prf) {
		return Config{}, fmt.Errorf("qwen35: geometry partial_rotary_factor %v is outside (0, 1]", prf)
	}
	if r := g.RopeScaling; r != nil {
		// The config's own YaRN: the model serves the scaled context.
		c.RopeScaling = RopeScaling{Type: r.Type, Factor: r.Factor, OriginalMaxPosition: r.OriginalMaxPositionEmbeddings,
			BetaFast: r.BetaFast, BetaSlow: r.BetaSlow, AttentionFactor: r.AttentionFactor, NoTruncate: !r.Truncate}
		c.MaxContext = r.Context(g.MaxPositionEmbeddings)
	}
	kinds, err := layerKinds(g.LayerTypes, g.NumLayers)
	if err != nil {
		return Config{}, err
	}
	c.Layers = kinds
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// layerKinds parses layer_types, or derives them as transformers does when
// the field is absent: every fourth layer is full attention.
func layerKinds(types []string, numLayers int) ([]LayerKind, error) {
	if numLayers <= 0 {
		return nil, fmt.Errorf("qwen35: geometry num_hidden_layers %d must be positive", numLayers)
	}
	kinds := make([]LayerKind, numLayers)
	if len(types) == 0 {
		for i := range kinds {
			if (i+1)%defaultFullAttentionInterval == 0 {
				kinds[i] = FullAttention
			}
		}
		return kinds, nil
	}
	if len(types) != numLayers {
		return nil, fmt.Errorf("qwen35: geometry has %d layer_types for %d layers", len(types), numLayers)
	}
	for i, t := range types {
		switch t {
		case "linear_attention":
			kinds[i] = LinearAttention
		case "full_attention":
			kinds[i] = FullAttention
		default:
			return nil, fmt.Errorf("qwen35: geometry layer_types[%d] = %q: want \"linear_attention\" or \"full_attention\"", i, t)
		}
	}
	return kinds, nil
}

// Validate reports the first field that makes c unusable.
func (c Config) Validate() error {
	var more []blocks.Field
	switch c.Arch {
	case ArchMoE:
		more = []blocks.Field{{Name: "num_experts", Value: c.NumExperts}, {Name: "num_experts_per_tok", Value: c.ExpertsPerToken},
			{Name: "moe_intermediate_size", Value: c.ExpertIntermediate},
			{Name: "shared_expert_intermediate_size", Value: c.SharedIntermediate}}
	case ArchDense:
		more = []blocks.Field{{Name: "intermediate_size", Value: c.Intermediate}}
	default:
		return fmt.Errorf("qwen35: architecture %q: want %q or %q", c.Arch, ArchMoE, ArchDense)
	}
	if err := c.trunk().Check("qwen35", more...); err != nil {
		return err
	}
	if c.Arch == ArchMoE && c.ExpertsPerToken > c.NumExperts {
		return fmt.Errorf("qwen35: config num_experts_per_tok %d exceeds num_experts %d", c.ExpertsPerToken, c.NumExperts)
	}
	if err := c.RopeScaling.validate(); err != nil {
		return err
	}
	for i, k := range c.Layers {
		if k != LinearAttention && k != FullAttention {
			return fmt.Errorf("qwen35: config layer %d has unknown kind %v", i, k)
		}
	}
	return nil
}

// trunk is the part of c that package blocks checks for every architecture.
func (c Config) trunk() blocks.Trunk {
	return blocks.Trunk{VocabSize: c.VocabSize, HiddenSize: c.HiddenSize, Layers: len(c.Layers), MaxContext: c.MaxContext,
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim, RotaryDim: c.RotaryDim, RopeTheta: c.RopeTheta,
		RMSNormEps: c.RMSNormEps, ConvKernel: c.ConvKernel, LinearKeyHeads: c.LinearKeyHeads,
		LinearValueHeads: c.LinearValueHeads, LinearKeyDim: c.LinearKeyDim, LinearValueDim: c.LinearValueDim}
}

// ConvChannels is C = 2·Hk·Dk + Hv·Dv, the width of in_proj_qkv and of the conv.
func (c Config) ConvChannels() int { return 2*c.keyDim() + c.valueDim() }

func (c Config) keyDim() int   { return c.LinearKeyHeads * c.LinearKeyDim }
func (c Config) valueDim() int { return c.LinearValueHeads * c.LinearValueDim }
func (c Config) kvDim() int    { return c.NumKVHeads * c.HeadDim }

// StateBytes is what NewState allocates for a sequence holding kvTokens of
// KV capacity (clamped to MaxContext) with a float32 cache: K and V of every
// full-attention layer and the conv window and recurrent matrix of every
// Gated DeltaNet layer (float32 whatever the cache). The footprint
// documentation and its checks use it; StateBytesAt is any width.
func (c Config) StateBytes(kvTokens int) int64 { return c.StateBytesAt(kvTokens, KVFloat32) }

// StateBytesAt is StateBytes for a KV cache of the given width.
func (c Config) StateBytesAt(kvTokens, bits int) int64 {
	tokens := int64(min(kvTokens, c.MaxContext))
	var n int64
	for _, kind := range c.Layers {
		switch kind {
		case FullAttention:
			n += tokens * c.KVBytesPerToken(bits)
		case LinearAttention:
			n += 4 * int64((c.ConvKernel-1)*c.ConvChannels()+c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
		}
	}
	return n
}
