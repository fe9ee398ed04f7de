package blocks

import (
	"fmt"
	"math"
)

// Trunk is the geometry every Qwen decoder built from these blocks has: the
// embedding, the gated attention and the Gated DeltaNet. Its fields carry
// their config.json names, which the errors use.
type Trunk struct {
	VocabSize, HiddenSize, Layers, MaxContext int // vocab_size, hidden_size, num_hidden_layers, max_position_embeddings
	Heads, KVHeads, HeadDim                   int // num_attention_heads, num_key_value_heads, head_dim
	RotaryDim                                 int // head_dim × partial_rotary_factor
	RopeTheta                                 float64
	RMSNormEps                                float32
	ConvKernel                                int // linear_conv_kernel_dim
	LinearKeyHeads, LinearValueHeads          int // linear_num_key_heads, linear_num_value_heads
	LinearKeyDim, LinearValueDim              int // linear_key_head_dim, linear_value_head_dim
}

// Field is an architecture's own config.json field that must be positive.
type Field struct {
	Name  string
	Value int
}

// Check reports, prefixed by arch, the first field of t or of more that is
// not positive, then the first of t's ratios and ranges the blocks cannot
// run: heads that do not group, an odd or too wide rotary dim, a rope_theta
// or rms_norm_eps out of range.
func (t Trunk) Check(arch string, more ...Field) error {
	fields := []Field{
		{"vocab_size", t.VocabSize}, {"hidden_size", t.HiddenSize}, {"num_hidden_layers", t.Layers},
		{"max_position_embeddings", t.MaxContext},
		{"num_attention_heads", t.Heads}, {"num_key_value_heads", t.KVHeads}, {"head_dim", t.HeadDim},
		{"linear_conv_kernel_dim", t.ConvKernel}, {"linear_num_key_heads", t.LinearKeyHeads},
		{"linear_num_value_heads", t.LinearValueHeads}, {"linear_key_head_dim", t.LinearKeyDim},
		{"linear_value_head_dim", t.LinearValueDim},
	}
	for _, f := range append(fields, more...) {
		if f.Value <= 0 {
			return fmt.Errorf("%s: config %s = %d, must be positive", arch, f.Name, f.Value)
		}
	}
	switch {
	case t.Heads%t.KVHeads != 0:
		return fmt.Errorf("%s: config num_attention_heads %d is not a multiple of num_key_value_heads %d", arch, t.Heads, t.KVHeads)
	case t.LinearValueHeads%t.LinearKeyHeads != 0:
		return fmt.Errorf("%s: config linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", arch, t.LinearValueHeads, t.LinearKeyHeads)
	case t.RotaryDim <= 0 || t.RotaryDim%2 != 0 || t.RotaryDim > t.HeadDim:
		return fmt.Errorf("%s: config rotary dim %d (head_dim × partial_rotary_factor) must be even and in (0, head_dim=%d]", arch, t.RotaryDim, t.HeadDim)
	case !(t.RopeTheta > 1) || math.IsInf(t.RopeTheta, 0):
		return fmt.Errorf("%s: config rope_theta %v must be a finite number above 1", arch, t.RopeTheta)
	case !(t.RMSNormEps > 0) || math.IsInf(float64(t.RMSNormEps), 0):
		return fmt.Errorf("%s: config rms_norm_eps %v must be positive and finite", arch, t.RMSNormEps)
	}
	return nil
}

// KindName is the config.json name of layer kind k, names[k], for an
// architecture's LayerKind.String; a kind past names prints as LayerKind(k).
func KindName(k uint8, names ...string) string {
	if int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("LayerKind(%d)", k)
}
