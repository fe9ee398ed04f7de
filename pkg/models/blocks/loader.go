package blocks

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// Weights gives a decoder's resident tensors by canonical name: the Hugging
// Face name with its "model.language_model." prefix rewritten to "model."
// ("model.embed_tokens.weight", "model.layers.3.self_attn.q_proj.weight",
// "lm_head.weight"). The model never learns whether they live in RAM, in an
// mmap'd file or anywhere else.
type Weights interface {
	// Matrix returns a linear weight [out, in] in any kernels encoding.
	Matrix(name string) (*kernels.Matrix, error)
	// Vector returns a 1-D parameter widened to float32 (norms, A_log,
	// dt_bias); a conv1d weight [C, 1, K] comes flattened to C·K values.
	Vector(name string) ([]float32, error)
	// Has reports whether name exists.
	Has(name string) bool
}

// Loader fetches tensors and checks their shapes, remembering the first
// error so a model's New reads every tensor in a straight line and reports
// the first one that does not fit, by name.
type Loader struct {
	Arch string // prefix of errors: the architecture package
	W    Weights
	Err  error
}

// Matrix fetches name and checks that it is rows×cols; nil after an error.
func (l *Loader) Matrix(name string, rows, cols int) *kernels.Matrix {
	if l.Err != nil {
		return nil
	}
	m, err := l.W.Matrix(name)
	if err == nil {
		err = CheckMatrix(m, rows, cols)
	}
	if err != nil {
		l.Err = fmt.Errorf("%s: tensor %s: %w", l.Arch, name, err)
		return nil
	}
	return m
}

// Vector fetches name and checks that it has n values; nil after an error.
func (l *Loader) Vector(name string, n int) []float32 {
	if l.Err != nil {
		return nil
	}
	v, err := l.W.Vector(name)
	if err != nil {
		l.Err = fmt.Errorf("%s: tensor %s: %w", l.Arch, name, err)
		return nil
	}
	if len(v) != n {
		l.Err = fmt.Errorf("%s: tensor %s has %d values, the geometry needs %d; the install does not match its manifest geometry", l.Arch, name, len(v), n)
		return nil
	}
	return v
}

// Norm fetches an n-value norm weight w and returns 1 + w, the form the
// norms multiply by.
func (l *Loader) Norm(name string, n int) []float32 { return OnePlus(l.Vector(name, n)) }

// GDN fetches the Gated DeltaNet tensors of the layer whose names start with
// prefix ("model.layers.0.") for the geometry g over a hidden width of
// hidden, and precomputes −exp(A_log).
func (l *Loader) GDN(prefix string, g *GDN, hidden int) *GDNWeights {
	C, Hv, vd := g.Channels(), g.ValueHeads, g.ValueHeads*g.ValueDim
	w := &GDNWeights{
		QKV:    l.Matrix(prefix+"linear_attn.in_proj_qkv.weight", C, hidden),
		Z:      l.Matrix(prefix+"linear_attn.in_proj_z.weight", vd, hidden),
		B:      l.Matrix(prefix+"linear_attn.in_proj_b.weight", Hv, hidden),
		A:      l.Matrix(prefix+"linear_attn.in_proj_a.weight", Hv, hidden),
		Conv:   l.Vector(prefix+"linear_attn.conv1d.weight", C*g.Kernel),
		DtBias: l.Vector(prefix+"linear_attn.dt_bias", Hv),
		Norm:   l.Vector(prefix+"linear_attn.norm.weight", g.ValueDim),
		Out:    l.Matrix(prefix+"linear_attn.out_proj.weight", hidden, vd),
	}
	if aLog := l.Vector(prefix+"linear_attn.A_log", Hv); aLog != nil {
		w.NegExpA = make([]float32, Hv)
		for h, v := range aLog {
			w.NegExpA[h] = -Exp32(v)
		}
	}
	return w
}

// MoE fetches the router, the shared expert of intermediate width shared
// and its gate, of the layer whose names start with prefix, for the block
// b (its NumExperts and Hidden).
func (l *Loader) MoE(prefix string, b *MoE, shared int) MoEWeights {
	H := b.Hidden
	return MoEWeights{
		Router: l.Matrix(prefix+"mlp.gate.weight", b.NumExperts, H),
		Shared: MLPWeights{
			Gate: l.Matrix(prefix+"mlp.shared_expert.gate_proj.weight", shared, H),
			Up:   l.Matrix(prefix+"mlp.shared_expert.up_proj.weight", shared, H),
			Down: l.Matrix(prefix+"mlp.shared_expert.down_proj.weight", H, shared),
		},
		SharedGate: l.Matrix(prefix+"mlp.shared_expert_gate.weight", 1, H),
	}
}

// Attention fetches the gated attention projections and q/k norms of the
// layer whose names start with prefix: q_proj carries the query and its
// gate (2·heads·headDim rows), k and v kvDim rows each.
func (l *Loader) Attention(prefix string, hidden, heads, headDim, kvDim int) AttnWeights {
	return AttnWeights{
		Q:     l.Matrix(prefix+"self_attn.q_proj.weight", 2*heads*headDim, hidden),
		K:     l.Matrix(prefix+"self_attn.k_proj.weight", kvDim, hidden),
		V:     l.Matrix(prefix+"self_attn.v_proj.weight", kvDim, hidden),
		O:     l.Matrix(prefix+"self_attn.o_proj.weight", hidden, heads*headDim),
		QNorm: l.Norm(prefix+"self_attn.q_norm.weight", headDim),
		KNorm: l.Norm(prefix+"self_attn.k_norm.weight", headDim),
	}
}

// AttnWeights are a gated attention layer's projections and norms.
type AttnWeights struct {
	Q, K, V, O   *kernels.Matrix
	QNorm, KNorm []float32 // 1 + w
}

// LayerPrefix is the start of decoder layer i's tensor names.
func LayerPrefix(i int) string { return fmt.Sprintf("model.layers.%d.", i) }
