package packexperts

import (
	"fmt"
	"math"
)

// RopeTypeYaRN is the only RopeScaling.Type an install carries.
const RopeTypeYaRN = "yarn"

// RopeScaling is YaRN as config.json states it, with transformers'
// defaults and the attention factor resolved by the converter, so that a
// reader computes the frequencies without knowing how configs spell them
// (docs/kv-cache.md).
type RopeScaling struct {
	Type                          string  `json:"rope_type"` // "yarn"
	Factor                        float64 `json:"factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
	BetaFast                      float64 `json:"beta_fast"`
	BetaSlow                      float64 `json:"beta_slow"`
	AttentionFactor               float64 `json:"attention_factor"`
	Truncate                      bool    `json:"truncate"`
}

// Context is the number of positions the scaled model serves: the
// original context times the factor, or max_position_embeddings when that
// is larger (as vLLM and transformers' configs count it).
func (r *RopeScaling) Context(maxPositionEmbeddings int) int {
	return max(maxPositionEmbeddings, int(math.Floor(float64(r.OriginalMaxPositionEmbeddings)*r.Factor)))
}

// maxRopeFactor bounds factor: 1,024 times any trained context is far
// beyond what any release asks, and keeps the context an int.
const maxRopeFactor = 1024

// Validate checks r against the geometry's max_position_embeddings. Each
// message starts with the field's name, for the caller to prefix with
// where the field sits (rope_scaling. in a manifest, rope_parameters. in
// a config).
func (r *RopeScaling) Validate(maxPositionEmbeddings int) error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case r.Type != RopeTypeYaRN:
		return fmt.Errorf("rope_type %q is not supported; only %q is", r.Type, RopeTypeYaRN)
	case !finite(r.Factor) || r.Factor <= 1 || r.Factor > maxRopeFactor:
		return fmt.Errorf("factor %v must be a finite number above 1 and at most %d", r.Factor, maxRopeFactor)
	case r.OriginalMaxPositionEmbeddings <= 0 || r.OriginalMaxPositionEmbeddings > maxPositionEmbeddings:
		return fmt.Errorf("original_max_position_embeddings %d must be positive and at most max_position_embeddings %d", r.OriginalMaxPositionEmbeddings, maxPositionEmbeddings)
	case !finite(r.BetaFast) || !finite(r.BetaSlow) || r.BetaSlow <= 0 || r.BetaFast <= r.BetaSlow:
		return fmt.Errorf("beta_fast %v and beta_slow %v must be finite with beta_fast > beta_slow > 0", r.BetaFast, r.BetaSlow)
	case !finite(r.AttentionFactor) || r.AttentionFactor <= 0:
		return fmt.Errorf("attention_factor %v must be a finite positive number", r.AttentionFactor)
	}
	return nil
}
