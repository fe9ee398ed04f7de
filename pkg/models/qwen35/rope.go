package qwen35

import (
	"fmt"
	"math"
	"slices"

	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// RopeScaling is YaRN as transformers 5.17 computes it
// (modeling_rope_utils._compute_yarn_parameters): the rotary frequencies
// that turn fewer than BetaSlow times over the original context are divided
// by Factor, those that turn more than BetaFast times are kept, a linear
// ramp over the dimensions in between blends the two, and cos and sin are
// multiplied by the attention factor (so only the rotated dims of q and k
// are scaled). docs/kv-cache.md.
type RopeScaling struct {
	Type                string  // "" (plain RoPE) or "yarn"
	Factor              float64 // context extension factor
	OriginalMaxPosition int     // the trained context the ramp is measured against
	BetaFast, BetaSlow  float64 // 0 means transformers' defaults, 32 and 1
	AttentionFactor     float64 // 0 means 0.1·ln(Factor) + 1
	NoTruncate          bool    // keep the correction range fractional (transformers' truncate=false)
}

// YaRN is the rope_type value that selects YaRN.
const YaRN = "yarn"

// YaRNFactors are the context extensions WithYaRN accepts: twice and four
// times the trained context (524,288 and 1,048,576 tokens for the 262,144
// of Qwen3.5/3.6).
var YaRNFactors = []int{2, 4}

// WithYaRN returns c extended to maxContext tokens with YaRN: factor =
// maxContext / the trained context, original_max_position_embeddings the
// trained context, transformers' defaults for the rest.
func (c Config) WithYaRN(maxContext int) (Config, error) {
	if r := c.RopeScaling; r.Type != "" {
		return Config{}, fmt.Errorf("qwen35: this model's config.json already sets %s RoPE scaling (factor %v over %d positions: %d tokens), which applies without a flag; drop --rope-scaling", r.Type, r.Factor, r.OriginalMaxPosition, c.MaxContext)
	}
	native := c.MaxContext
	if maxContext%native != 0 || !slices.Contains(YaRNFactors, maxContext/native) {
		return Config{}, fmt.Errorf("qwen35: YaRN needs a max context of %d or %d tokens (2 or 4 times the trained %d), not %d", 2*native, 4*native, native, maxContext)
	}
	c.RopeScaling = RopeScaling{Type: YaRN, Factor: float64(maxContext / native), OriginalMaxPosition: native}
	c.MaxContext = maxContext
	return c, c.Validate()
}

func (r RopeScaling) validate() error {
	switch r.Type {
	case "":
		return nil
	case YaRN:
	default:
		return fmt.Errorf("qwen35: rope scaling %q is not supported; only %q is", r.Type, YaRN)
	}
	switch {
	case !(r.Factor >= 1) || math.IsInf(r.Factor, 0):
		return fmt.Errorf("qwen35: YaRN factor %v must be a finite number of at least 1", r.Factor)
	case r.OriginalMaxPosition <= 0:
		return fmt.Errorf("qwen35: YaRN original_max_position_embeddings %d must be positive", r.OriginalMaxPosition)
	case r.BetaFast < 0 || r.BetaSlow < 0 || r.AttentionFactor < 0 || math.IsNaN(r.BetaFast+r.BetaSlow+r.AttentionFactor):
		return fmt.Errorf("qwen35: YaRN beta_fast %v, beta_slow %v and attention_factor %v must not be negative", r.BetaFast, r.BetaSlow, r.AttentionFactor)
	}
	return nil
}

// newRope is plain RoPE, or YaRN when sc says so.
func newRope(theta float64, rd int, sc RopeScaling) blocks.Rope {
	if sc.Type != YaRN {
		return blocks.NewRope(theta, rd)
	}
	inv, attn := yarnFrequencies(theta, rd, blocks.RopePosFreq(theta, rd), sc)
	return blocks.Rope{InvFreq: inv, Attn: attn}
}

// yarnFrequencies follows _compute_yarn_parameters step by step, in the
// same precisions: the correction range in float64 (Python floats), the
// ramp and the blend in float32 (torch tensors), every product rounded.
func yarnFrequencies(theta float64, rd int, posFreq []float32, sc RopeScaling) ([]float32, float32) {
	factor := sc.Factor
	attn := sc.AttentionFactor
	if attn == 0 {
		attn = 1
		if factor > 1 {
			attn = 0.1*math.Log(factor) + 1
		}
	}
	betaFast, betaSlow := sc.BetaFast, sc.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	dim := float64(rd)
	correction := func(rotations float64) float64 {
		return dim * math.Log(float64(sc.OriginalMaxPosition)/(rotations*2*math.Pi)) / (2 * math.Log(theta))
	}
	low, high := correction(betaFast), correction(betaSlow)
	if !sc.NoTruncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, dim-1)
	if low == high {
		high += 0.001 // transformers' guard against a zero-width ramp
	}
	f32 := float32(factor)
	inv := make([]float32, len(posFreq))
	for j, p := range posFreq {
		extrapolation := 1 / p
		interpolation := 1 / float32(f32*p)
		ramp := float32(float32(j)-float32(low)) / float32(high-low)
		ramp = min(max(ramp, 0), 1)
		extra := 1 - ramp // inv_freq_extrapolation_factor
		inv[j] = float32(interpolation*float32(1-extra)) + float32(extrapolation*extra)
	}
	return inv, float32(attn)
}
