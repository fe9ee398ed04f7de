package blocks

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// shapes is a Weights whose matrices are float32 of the given [rows, cols]
// and whose vectors have the given lengths (values 0, 1, 2, …).
type shapes map[string][2]int

func (s shapes) Matrix(name string) (*kernels.Matrix, error) {
	d, ok := s[name]
	if !ok {
		return nil, fmt.Errorf("not in the install")
	}
	return &kernels.Matrix{Rows: d[0], Cols: d[1], Enc: kernels.F32, Data: make([]byte, 4*d[0]*d[1])}, nil
}

func (s shapes) Vector(name string) ([]float32, error) {
	d, ok := s[name]
	if !ok {
		return nil, fmt.Errorf("not in the install")
	}
	v := make([]float32, d[0])
	for i := range v {
		v[i] = float32(i)
	}
	return v, nil
}

func (s shapes) Has(name string) bool { _, ok := s[name]; return ok }

// TestLoaderKeepsTheFirstError: a model's New reads every tensor in a line
// and reports the first that does not fit, naming the architecture and the
// tensor; nothing after it is fetched.
func TestLoaderKeepsTheFirstError(t *testing.T) {
	w := shapes{"a": {2, 3}, "v": {4}, "b": {5, 5}}
	for _, tc := range []struct {
		name string
		load func(l *Loader)
		want string // "" when every tensor fits
	}{
		{"fits", func(l *Loader) { l.Matrix("a", 2, 3); l.Vector("v", 4) }, ""},
		{"missing matrix", func(l *Loader) { l.Matrix("x", 2, 3); l.Matrix("b", 1, 1) },
			"qwenN: tensor x: not in the install"},
		{"wrong shape", func(l *Loader) { l.Matrix("a", 3, 2); l.Vector("missing", 1) },
			"qwenN: tensor a: shape [2, 3], the geometry needs [3, 2]"},
		{"wrong length", func(l *Loader) { l.Vector("v", 5); l.Matrix("a", 9, 9) },
			"qwenN: tensor v has 4 values, the geometry needs 5; the install does not match its manifest geometry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Loader{Arch: "qwenN", W: w}
			tc.load(l)
			switch {
			case tc.want == "" && l.Err != nil:
				t.Fatalf("unexpected error %v", l.Err)
			case tc.want != "" && (l.Err == nil || !strings.Contains(l.Err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", l.Err, tc.want)
			}
			if tc.want != "" && (l.Matrix("a", 2, 3) != nil || l.Vector("v", 4) != nil) {
				t.Fatal("the loader fetched a tensor after an error")
			}
		})
	}
}

// TestLoaderGDNAndNorms: the Gated DeltaNet tensors get their geometry's
// shapes, A_log becomes −exp(A_log) and norms come back as 1 + w.
func TestLoaderGDNAndNorms(t *testing.T) {
	g := &GDN{KeyHeads: 1, ValueHeads: 2, KeyDim: 3, ValueDim: 4, Kernel: 2}
	const H, p = 8, "model.layers.0.linear_attn."
	C, vd := g.Channels(), 8
	w := shapes{
		p + "in_proj_qkv.weight": {C, H}, p + "in_proj_z.weight": {vd, H},
		p + "in_proj_b.weight": {2, H}, p + "in_proj_a.weight": {2, H},
		p + "conv1d.weight": {C * 2}, p + "dt_bias": {2}, p + "norm.weight": {4},
		p + "out_proj.weight": {H, vd}, p + "A_log": {2},
	}
	l := &Loader{Arch: "qwenN", W: w}
	gw := l.GDN(LayerPrefix(0), g, H)
	norm := l.Norm(p+"dt_bias", 2)
	if l.Err != nil {
		t.Fatal(l.Err)
	}
	if gw.QKV.Rows != C || gw.Out.Cols != vd || len(gw.Conv) != 2*C {
		t.Fatalf("shapes: qkv %d rows, out %d cols, conv %d values", gw.QKV.Rows, gw.Out.Cols, len(gw.Conv))
	}
	if want := []float32{-1, -Exp32(1)}; gw.NegExpA[0] != want[0] || gw.NegExpA[1] != want[1] {
		t.Fatalf("NegExpA %v, want %v", gw.NegExpA, want)
	}
	if norm[0] != 1 || norm[1] != 2 {
		t.Fatalf("Norm %v, want 1 + w = [1 2]", norm)
	}
}
