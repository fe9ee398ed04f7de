package blocks

import (
	"math"
	"strings"
	"testing"
)

// TestTrunkCheck: each bad field is named with the architecture's prefix,
// positivity before the ratios, so no check divides by zero.
func TestTrunkCheck(t *testing.T) {
	good := Trunk{VocabSize: 10, HiddenSize: 8, Layers: 2, MaxContext: 64, Heads: 4, KVHeads: 2, HeadDim: 8,
		RotaryDim: 4, RopeTheta: 1e4, RMSNormEps: 1e-6, ConvKernel: 4, LinearKeyHeads: 1, LinearValueHeads: 2,
		LinearKeyDim: 4, LinearValueDim: 4}
	if err := good.Check("x", Field{"own_width", 3}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Trunk)
		more   []Field
		want   string
	}{
		{"zero vocab", func(t *Trunk) { t.VocabSize = 0 }, nil, "x: config vocab_size = 0, must be positive"},
		{"zero kv heads", func(t *Trunk) { t.KVHeads = 0 }, nil, "num_key_value_heads = 0"},
		{"zero linear key heads", func(t *Trunk) { t.LinearKeyHeads = 0 }, nil, "linear_num_key_heads = 0"},
		{"own field", func(*Trunk) {}, []Field{{"own_width", -1}}, "x: config own_width = -1, must be positive"},
		{"heads do not group", func(t *Trunk) { t.Heads = 3 }, nil, "num_attention_heads 3 is not a multiple of num_key_value_heads 2"},
		{"linear heads do not group", func(t *Trunk) { t.LinearKeyHeads, t.LinearValueHeads = 2, 3 }, nil, "linear_num_value_heads 3"},
		{"odd rotary dim", func(t *Trunk) { t.RotaryDim = 3 }, nil, "rotary dim 3"},
		{"rotary dim past the head", func(t *Trunk) { t.RotaryDim = 10 }, nil, "head_dim=8"},
		{"rope theta", func(t *Trunk) { t.RopeTheta = math.Inf(1) }, nil, "rope_theta"},
		{"eps", func(t *Trunk) { t.RMSNormEps = float32(math.NaN()) }, nil, "rms_norm_eps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := good
			tc.change(&tr)
			if err := tr.Check("x", tc.more...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestKindName(t *testing.T) {
	for k, want := range []string{"a", "b", "LayerKind(2)", "LayerKind(255)"} {
		if k == 3 {
			k = 255
		}
		if got := KindName(uint8(k), "a", "b"); got != want {
			t.Errorf("KindName(%d) = %q, want %q", k, got, want)
		}
	}
}
