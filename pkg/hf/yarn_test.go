package hf

import (
	"math"
	"testing"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// yarnParams sets rope_parameters to YaRN with the given extra fields.
func yarnParams(extra map[string]any) func(map[string]any) {
	return func(c map[string]any) {
		rope(c)["rope_type"] = "yarn"
		for k, v := range extra {
			rope(c)[k] = v
		}
	}
}

// TestParseConfigYaRN: the fields as transformers 5.17's
// _compute_yarn_parameters reads them, its defaults resolved.
func TestParseConfigYaRN(t *testing.T) {
	// The fixture's max_position_embeddings is 4096.
	ln4 := 0.1*math.Log(4) + 1
	cases := []struct {
		name string
		edit func(map[string]any)
		want packexperts.RopeScaling
	}{
		{"the references' parameters", yarnParams(map[string]any{"factor": 4.0, "original_max_position_embeddings": 1024}),
			packexperts.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 1024, BetaFast: 32, BetaSlow: 1, AttentionFactor: ln4, Truncate: true}},
		{"every field", yarnParams(map[string]any{"factor": 2.0, "original_max_position_embeddings": 2048, "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.5, "truncate": false}),
			packexperts.RopeScaling{Type: "yarn", Factor: 2, OriginalMaxPositionEmbeddings: 2048, BetaFast: 16, BetaSlow: 2, AttentionFactor: 1.5}},
		{"zero betas are the defaults", yarnParams(map[string]any{"factor": 4.0, "original_max_position_embeddings": 1024, "beta_fast": 0, "beta_slow": 0}),
			packexperts.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 1024, BetaFast: 32, BetaSlow: 1, AttentionFactor: ln4, Truncate: true}},
		{"mscale over mscale_all_dim", yarnParams(map[string]any{"factor": 4.0, "original_max_position_embeddings": 1024, "mscale": 0.707, "mscale_all_dim": 0.5}),
			packexperts.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 1024, BetaFast: 32, BetaSlow: 1, AttentionFactor: (0.1*0.707*math.Log(4) + 1) / (0.1*0.5*math.Log(4) + 1), Truncate: true}},
		{"mscale alone is ignored", yarnParams(map[string]any{"factor": 4.0, "original_max_position_embeddings": 1024, "mscale": 0.707}),
			packexperts.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 1024, BetaFast: 32, BetaSlow: 1, AttentionFactor: ln4, Truncate: true}},
		{"factor from the two contexts", yarnParams(map[string]any{"factor": nil, "original_max_position_embeddings": 1024}),
			packexperts.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 1024, BetaFast: 32, BetaSlow: 1, AttentionFactor: ln4, Truncate: true}},
		{"transformers 4 rope_scaling", func(c map[string]any) {
			delete(text(c), "rope_parameters")
			text(c)["rope_theta"] = 1e7
			text(c)["rope_scaling"] = map[string]any{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
		}, packexperts.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 1024, BetaFast: 32, BetaSlow: 1, AttentionFactor: ln4, Truncate: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, g := parseEdited(t, c.edit)
			if g.RopeScaling == nil || *g.RopeScaling != c.want {
				t.Fatalf("rope scaling %+v, want %+v", g.RopeScaling, c.want)
			}
			if got := g.RopeScaling.Context(g.MaxPositionEmbeddings); got != max(4096, int(c.want.Factor)*c.want.OriginalMaxPositionEmbeddings) {
				t.Errorf("context %d", got)
			}
		})
	}
	_, g, err := ParseConfig(encode(t, fixtureConfig(t)), "config.json")
	if err != nil || g.RopeScaling != nil {
		t.Errorf("the default rope type gives %+v, %v; want no scaling", g.RopeScaling, err)
	}
}

// TestParseConfigYaRNErrors: each bad field is named.
func TestParseConfigYaRNErrors(t *testing.T) {
	base := map[string]any{"factor": 4.0, "original_max_position_embeddings": 1024}
	with := func(k string, v any) func(map[string]any) {
		m := map[string]any{k: v}
		for bk, bv := range base {
			if bk != k {
				m[bk] = bv
			}
		}
		return yarnParams(m)
	}
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"factor 1", with("factor", 1.0), "rope_parameters.factor 1 must be a finite number above 1"},
		{"factor below 1", with("factor", 0.5), "rope_parameters.factor 0.5"},
		{"factor huge", with("factor", 1e300), "rope_parameters.factor 1e+300"},
		{"factor not a number", with("factor", "4"), "factor"},
		{"original past max_position_embeddings", with("original_max_position_embeddings", 8192), "rope_parameters.original_max_position_embeddings 8192 must be positive and at most max_position_embeddings 4096"},
		{"original zero", with("original_max_position_embeddings", 0), "rope_parameters.original_max_position_embeddings 0"},
		{"original fractional", with("original_max_position_embeddings", 1024.5), "original_max_position_embeddings"},
		{"betas reversed", with("beta_slow", 64.0), "rope_parameters.beta_fast 32 and beta_slow 64"},
		{"beta negative", with("beta_fast", -1.0), "rope_parameters.beta_fast -1"},
		{"attention factor zero", with("attention_factor", 0.0), "rope_parameters.attention_factor 0"},
		{"mscale negative", with("mscale", -1.0), "rope_parameters.mscale -1"},
		{"both layouts", func(c map[string]any) {
			text(c)["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4.0}
		}, "both rope_parameters and rope_scaling"},
		{"transformers 4 field named", func(c map[string]any) {
			delete(text(c), "rope_parameters")
			text(c)["rope_theta"] = 1e7
			text(c)["rope_scaling"] = map[string]any{"type": "yarn", "factor": 0.5}
		}, "rope_scaling.factor 0.5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			refusesEdited(t, c.edit, c.want)
		})
	}
}
