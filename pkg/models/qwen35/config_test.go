package qwen35

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

func tinyGeometry() packexperts.Geometry {
	return packexperts.Geometry{
		VocabSize: 4160, HiddenSize: 128, NumLayers: 4,
		LayerTypes: []string{"linear_attention", "linear_attention", "linear_attention", "full_attention"},
		RMSNormEps: 1e-6, HiddenAct: "silu", NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32,
		RopeTheta: 1e7, PartialRotaryFactor: 0.25, MaxPositionEmbeddings: 4096,
		LinearConvKernelDim: 4, LinearNumKeyHeads: 2, LinearNumValueHeads: 4,
		LinearKeyHeadDim: 32, LinearValueHeadDim: 32, IntermediateSize: 256,
		NumExperts: 16, NumExpertsPerTok: 4, MoeIntermediateSize: 64, SharedExpertIntermediateSize: 64,
	}
}

func TestConfigFromGeometry(t *testing.T) {
	c, err := ConfigFromGeometry(ArchMoE, tinyGeometry())
	if err != nil {
		t.Fatal(err)
	}
	if c.RotaryDim != 8 || c.ConvChannels() != 256 || c.Layers[3] != FullAttention || c.Layers[0] != LinearAttention {
		t.Errorf("derived fields wrong: %+v", c)
	}
	g := tinyGeometry()
	g.LayerTypes, g.NumLayers, g.PartialRotaryFactor = nil, 8, 0
	c, err = ConfigFromGeometry(ArchDense, g)
	if err != nil {
		t.Fatal(err)
	}
	if c.RotaryDim != 8 || c.Layers[3] != FullAttention || c.Layers[7] != FullAttention || c.Layers[4] != LinearAttention {
		t.Errorf("defaults not applied: rotary %d layers %v", c.RotaryDim, c.Layers)
	}

	bad := []struct {
		name, arch, want string
		edit             func(*packexperts.Geometry)
	}{
		{"unknown arch", "llama", "architecture", func(*packexperts.Geometry) {}},
		{"gelu", ArchMoE, "hidden_act", func(g *packexperts.Geometry) { g.HiddenAct = "gelu" }},
		{"zero hidden", ArchMoE, "hidden_size", func(g *packexperts.Geometry) { g.HiddenSize = 0 }},
		{"no layers", ArchMoE, "num_hidden_layers", func(g *packexperts.Geometry) { g.NumLayers = 0 }},
		{"layer_types count", ArchMoE, "layer_types", func(g *packexperts.Geometry) { g.NumLayers = 5 }},
		{"layer type name", ArchMoE, "layer_types[1]", func(g *packexperts.Geometry) { g.LayerTypes[1] = "mamba" }},
		{"GQA", ArchMoE, "num_key_value_heads", func(g *packexperts.Geometry) { g.NumKeyValueHeads = 3 }},
		{"GDN heads", ArchMoE, "linear_num_key_heads", func(g *packexperts.Geometry) { g.LinearNumKeyHeads = 3 }},
		{"odd rotary", ArchMoE, "rotary", func(g *packexperts.Geometry) { g.PartialRotaryFactor = 0.03125 }},
		{"rotary factor", ArchMoE, "partial_rotary_factor", func(g *packexperts.Geometry) { g.PartialRotaryFactor = 2 }},
		{"theta", ArchMoE, "rope_theta", func(g *packexperts.Geometry) { g.RopeTheta = 0 }},
		{"eps", ArchMoE, "rms_norm_eps", func(g *packexperts.Geometry) { g.RMSNormEps = 0 }},
		{"top-k", ArchMoE, "num_experts_per_tok", func(g *packexperts.Geometry) { g.NumExpertsPerTok = 17 }},
		{"no experts", ArchMoE, "num_experts", func(g *packexperts.Geometry) { g.NumExperts = 0 }},
		{"dense width", ArchDense, "intermediate_size", func(g *packexperts.Geometry) { g.IntermediateSize = 0 }},
		{"context", ArchMoE, "max_position_embeddings", func(g *packexperts.Geometry) { g.MaxPositionEmbeddings = 0 }},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			g := tinyGeometry()
			g.LayerTypes = append([]string(nil), g.LayerTypes...)
			tc.edit(&g)
			_, err := ConfigFromGeometry(tc.arch, g)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// editedWeights wraps the fixture weights with one tensor changed.
type editedWeights struct {
	Weights
	drop   string
	matrix func(name string, m *kernels.Matrix) *kernels.Matrix
	vector func(name string, v []float32) []float32
}

func (e editedWeights) Has(name string) bool { return name != e.drop && e.Weights.Has(name) }

func (e editedWeights) Matrix(name string) (*kernels.Matrix, error) {
	m, err := e.Weights.Matrix(name)
	if err != nil || name == e.drop {
		return nil, errorf(err, name)
	}
	if e.matrix != nil {
		m = e.matrix(name, m)
	}
	return m, nil
}

func (e editedWeights) Vector(name string) ([]float32, error) {
	v, err := e.Weights.Vector(name)
	if err != nil || name == e.drop {
		return nil, errorf(err, name)
	}
	if e.vector != nil {
		v = e.vector(name, v)
	}
	return v, nil
}

func errorf(err error, name string) error {
	if err != nil {
		return err
	}
	return &missingError{name}
}

type missingError struct{ name string }

func (e *missingError) Error() string { return "no tensor " + e.name }

// TestNewRejectsMismatchedWeights checks that New validates every tensor up
// front and names the offending one.
func TestNewRejectsMismatchedWeights(t *testing.T) {
	fx := fixturesDir(t)
	cases := []struct {
		name, dir, want string
		edit            editedWeights
		cfg             func(*Config)
	}{
		{name: "missing q_proj", dir: "tiny-moe-fused", want: "model.layers.3.self_attn.q_proj.weight",
			edit: editedWeights{drop: "model.layers.3.self_attn.q_proj.weight"}},
		{name: "missing A_log", dir: "tiny-moe-fused", want: "model.layers.0.linear_attn.A_log",
			edit: editedWeights{drop: "model.layers.0.linear_attn.A_log"}},
		{name: "untied without lm_head", dir: "tiny-moe-fused", want: "lm_head.weight",
			edit: editedWeights{drop: "lm_head.weight"}},
		{name: "tied flag off in dense", dir: "tiny-dense", want: "lm_head.weight",
			cfg: func(c *Config) { c.TiedEmbeddings = false }},
		{name: "transposed out_proj", dir: "tiny-moe-fused", want: "model.layers.1.linear_attn.out_proj.weight",
			edit: editedWeights{matrix: func(n string, m *kernels.Matrix) *kernels.Matrix {
				if n == "model.layers.1.linear_attn.out_proj.weight" {
					c := *m
					c.Rows, c.Cols = m.Cols+1, m.Rows
					return &c
				}
				return m
			}}},
		{name: "short buffer", dir: "tiny-dense", want: "model.layers.2.mlp.up_proj.weight",
			edit: editedWeights{matrix: func(n string, m *kernels.Matrix) *kernels.Matrix {
				if n == "model.layers.2.mlp.up_proj.weight" {
					c := *m
					c.Data = c.Data[:len(c.Data)-2]
					return &c
				}
				return m
			}}},
		{name: "conv taps", dir: "tiny-dense", want: "model.layers.0.linear_attn.conv1d.weight",
			edit: editedWeights{vector: func(n string, v []float32) []float32 {
				if n == "model.layers.0.linear_attn.conv1d.weight" {
					return v[:len(v)-1]
				}
				return v
			}}},
		{name: "geometry wider than the tensors", dir: "tiny-dense", want: "model.embed_tokens.weight",
			cfg: func(c *Config) { c.VocabSize++ }},
		{name: "invalid config", dir: "tiny-dense", want: "num_attention_heads",
			cfg: func(c *Config) { c.NumHeads = 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(fx, tc.dir)
			sw := loadSnapshot(t, dir)
			cfg := fixtureConfig(t, dir)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			w := tc.edit
			w.Weights = sw
			_, err := New(cfg, w, sw, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
	t.Run("MoE without experts", func(t *testing.T) {
		dir := filepath.Join(fx, "tiny-moe-fused")
		sw := loadSnapshot(t, dir)
		if _, err := New(fixtureConfig(t, dir), sw, nil, nil); err == nil {
			t.Fatal("New accepted a MoE model without Experts")
		}
	})
}

// TestForwardRejectsBadArguments checks that argument errors leave the
// state untouched.
func TestForwardRejectsBadArguments(t *testing.T) {
	m, _ := fixtureModels[1].open(t, nil)
	other, _ := fixtureModels[1].open(t, nil)
	V := m.Config().VocabSize
	cases := []struct {
		name   string
		st     func() *State
		ids    []int
		logits []float32
		all    bool
		want   string
	}{
		{"no tokens", func() *State { return m.NewState(StateOptions{}) }, nil, nil, false, "no tokens"},
		{"negative id", func() *State { return m.NewState(StateOptions{}) }, []int{1, -1}, nil, false, "index 1"},
		{"id past vocab", func() *State { return m.NewState(StateOptions{}) }, []int{V}, nil, false, "outside the vocabulary"},
		{"short logits", func() *State { return m.NewState(StateOptions{}) }, []int{1, 2}, make([]float32, V), true, "logits"},
		{"long logits", func() *State { return m.NewState(StateOptions{}) }, []int{1, 2}, make([]float32, 2*V), false, "logits"},
		{"foreign state", func() *State { return other.NewState(StateOptions{}) }, []int{1}, nil, false, "NewState"},
		{"nil state", func() *State { return nil }, []int{1}, nil, false, "NewState"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st()
			err := m.Forward(st, tc.ids, tc.logits, tc.all)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
			if st != nil && st.Len() != 0 {
				t.Fatalf("state moved to %d tokens", st.Len())
			}
		})
	}
}
