package hf

import (
	"math"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// yarnFields are the YaRN keys of rope_parameters (or transformers 4's
// rope_scaling), as transformers 5.17's _compute_yarn_parameters reads
// them; pointers tell absent from zero.
type yarnFields struct {
	Factor                        *float64 `json:"factor"`
	OriginalMaxPositionEmbeddings *int     `json:"original_max_position_embeddings"`
	BetaFast                      *float64 `json:"beta_fast"`
	BetaSlow                      *float64 `json:"beta_slow"`
	AttentionFactor               *float64 `json:"attention_factor"`
	Mscale                        *float64 `json:"mscale"`
	MscaleAllDim                  *float64 `json:"mscale_all_dim"`
	Truncate                      *bool    `json:"truncate"`
}

// Transformers' YaRN defaults.
const (
	defaultBetaFast = 32
	defaultBetaSlow = 1
)

// yarn resolves y (read from the config's field, rope_parameters or
// rope_scaling) the way transformers does — an absent original context
// is max_position_embeddings, an absent factor the ratio of the two, an
// absent or zero beta its default, the attention factor from mscale and
// mscale_all_dim or 0.1·ln(factor)+1 — and validates the result, naming
// the field at fault.
func (y *yarnFields) yarn(field string, maxPos int, v *validator) *packexperts.RopeScaling {
	r := &packexperts.RopeScaling{Type: packexperts.RopeTypeYaRN, OriginalMaxPositionEmbeddings: orDefault(y.OriginalMaxPositionEmbeddings, maxPos), Truncate: orDefault(y.Truncate, true)}
	if y.Factor != nil {
		r.Factor = *y.Factor
	} else if r.OriginalMaxPositionEmbeddings > 0 {
		r.Factor = float64(maxPos) / float64(r.OriginalMaxPositionEmbeddings)
	}
	// Python's `x or default`: zero means the default too.
	r.BetaFast, r.BetaSlow = nonZero(y.BetaFast, defaultBetaFast), nonZero(y.BetaSlow, defaultBetaSlow)
	for _, f := range []struct {
		name string
		p    *float64
	}{{"mscale", y.Mscale}, {"mscale_all_dim", y.MscaleAllDim}} {
		if f.p != nil && (!(*f.p >= 0) || math.IsInf(*f.p, 0)) {
			v.fail("%s.%s %v must be a finite number, at least 0", field, f.name, *f.p)
			return nil
		}
	}
	switch {
	case y.AttentionFactor != nil:
		r.AttentionFactor = *y.AttentionFactor
	case nonZero(y.Mscale, 0) != 0 && nonZero(y.MscaleAllDim, 0) != 0:
		r.AttentionFactor = yarnMscale(r.Factor, *y.Mscale) / yarnMscale(r.Factor, *y.MscaleAllDim)
	default:
		r.AttentionFactor = yarnMscale(r.Factor, 1)
	}
	if err := r.Validate(maxPos); err != nil {
		v.fail("%s.%v", field, err)
		return nil
	}
	return r
}

// yarnMscale is transformers' get_mscale.
func yarnMscale(scale, mscale float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*mscale*math.Log(scale) + 1
}

func nonZero(p *float64, def float64) float64 {
	if p == nil || *p == 0 {
		return def
	}
	return *p
}
