package qwen35

import (
	"math"
	"path/filepath"
	"strconv"
	"testing"
)

// yarnLogitTol: YaRN logits against transformers past the native context.
// Plain RoPE agrees to 1e-4 (logitTol); the looser bound leaves room for
// the 1,300-token prompt's longer chain of float32 rounding.
const yarnLogitTol = 1e-3

// yarnConfig is the tiny-moe fixture with the YaRN parameters that
// scripts/yarn-refs.py gave transformers.
func yarnConfig(t *testing.T, r *longRefs) Config {
	t.Helper()
	cfg := fixtureConfig(t, filepath.Join(fixturesDir(t), fixtureModels[0].dir))
	rp := r.Yarn.RopeParameters
	cfg.RopeScaling = RopeScaling{Type: YaRN, Factor: rp.Factor, OriginalMaxPosition: rp.OriginalMaxPosition}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestYaRNFrequencies: the inverse frequencies and attention factor equal
// those transformers' rotary embedding held (float32 bits; the factor to
// float32).
func TestYaRNFrequencies(t *testing.T) {
	r := loadLongRefs(t)
	cfg := yarnConfig(t, r)
	rp := newRope(cfg.RopeTheta, cfg.RotaryDim, cfg.RopeScaling)
	for j, want := range r.Yarn.InvFreq {
		if rp.InvFreq[j] != float32(want) {
			t.Errorf("inv_freq[%d] = %v, transformers %v", j, rp.InvFreq[j], float32(want))
		}
	}
	if rp.Attn != float32(r.Yarn.AttentionScaling) {
		t.Errorf("attention factor %v, transformers %v", rp.Attn, r.Yarn.AttentionScaling)
	}
	plain := newRope(cfg.RopeTheta, cfg.RotaryDim, RopeScaling{})
	if plain.Attn != 1 || plain.InvFreq[0] != 1 {
		t.Errorf("plain RoPE: attention factor %v, inv_freq %v", plain.Attn, plain.InvFreq)
	}
}

// TestYaRNLogits runs the 1,300-token prompt with YaRN (factor 4 over an
// original context of 1,024): the logits at positions past the original
// context agree with transformers within yarnLogitTol, and so does the
// argmax at every position.
func TestYaRNLogits(t *testing.T) {
	if quickTests() {
		t.Skip("the 1,300-token prompt runs in the full test set")
	}
	r := loadLongRefs(t)
	cfg := yarnConfig(t, r)
	sw := loadSnapshot(t, filepath.Join(fixturesDir(t), fixtureModels[0].dir))
	m, err := New(cfg, sw, sw, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := r.Yarn.IDs
	V := cfg.VocabSize
	logits, _ := prefill(t, m, StateOptions{}, ids, []int{len(ids)})
	for pos, want := range r.Yarn.LogitsAt {
		p, _ := strconv.Atoi(pos)
		if p < r.Yarn.RopeParameters.OriginalMaxPosition {
			t.Fatalf("reference row %d is inside the original context", p)
		}
		d := maxAbsDiff(logits[p*V:(p+1)*V], want)
		t.Logf("position %d: max |Δlogit| %.3g against transformers", p, d)
		if d > yarnLogitTol || math.IsNaN(d) {
			t.Errorf("position %d: max |Δlogit| %.3g > %g", p, d, yarnLogitTol)
		}
	}
	for p := range ids {
		if got := argmax(logits[p*V : (p+1)*V]); got != r.Yarn.ArgmaxPerPosition[p] {
			t.Errorf("position %d: argmax %d, transformers %d", p, got, r.Yarn.ArgmaxPerPosition[p])
		}
	}
}

// TestWithYaRN: 2 and 4 times the trained context are accepted, anything
// else refused with the allowed values.
func TestWithYaRN(t *testing.T) {
	cfg := fixtureConfig(t, filepath.Join(fixturesDir(t), fixtureModels[0].dir))
	native := cfg.MaxContext
	for _, n := range []int{2 * native, 4 * native} {
		c, err := cfg.WithYaRN(n)
		if err != nil || c.MaxContext != n || c.RopeScaling.Factor != float64(n/native) || c.RopeScaling.OriginalMaxPosition != native {
			t.Errorf("WithYaRN(%d) = %+v, %v", n, c.RopeScaling, err)
		}
	}
	for _, n := range []int{native, 3 * native, 8 * native, native + 1} {
		if _, err := cfg.WithYaRN(n); err == nil {
			t.Errorf("WithYaRN(%d) accepted", n)
		}
	}
}
