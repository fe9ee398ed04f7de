package hf

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// FuzzParseIndex checks that the index parser never panics, that whatever it
// accepts is safe to join to the snapshot directory, and that the fast
// encoding/json path never accepts what the strict token walk refuses.
func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":4},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"sub/model.safetensors"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if fast, ok := parseWeightMapFast(data); ok {
			strict, err := parseWeightMapStrict(data)
			if err != nil || !maps.Equal(fast, strict) {
				t.Fatalf("fast path accepted %q as %v, strict path gave %v, %v", data, fast, strict, err)
			}
		}
		idx, err := ParseIndex(data, "fuzz.json")
		if err != nil {
			return
		}
		if len(idx.WeightMap) == 0 || !slices.IsSorted(idx.Shards) {
			t.Fatalf("accepted index %+v", idx)
		}
		shards := map[string]bool{}
		for _, s := range idx.WeightMap {
			shards[s] = true
			if checkRelativeName(s) != nil || strings.HasPrefix(s, "/") || slices.Contains(strings.Split(s, "/"), "..") {
				t.Fatalf("accepted shard name %q", s)
			}
		}
		if len(shards) != len(idx.Shards) {
			t.Fatalf("Shards %v do not match the weight map's files", idx.Shards)
		}
	})
}

// FuzzParseConfig checks that the config parser never panics and that every
// geometry it accepts satisfies what the runtime will rely on.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"model_type":"qwen3_5_text","vocab_size":8,"hidden_size":8,"num_hidden_layers":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		arch, g, err := ParseConfig(data, "fuzz.json")
		if err != nil {
			return
		}
		checkGeometryInvariants(t, arch, &g)
	})
}

func checkGeometryInvariants(t *testing.T, arch string, g *packexperts.Geometry) {
	t.Helper()
	sizes := []int{g.VocabSize, g.HiddenSize, g.NumLayers, g.NumAttentionHeads, g.NumKeyValueHeads, g.HeadDim,
		g.MaxPositionEmbeddings, g.LinearConvKernelDim, g.LinearNumKeyHeads, g.LinearNumValueHeads,
		g.LinearKeyHeadDim, g.LinearValueHeadDim}
	switch arch {
	case ArchMoE, ArchQwen4Exp:
		sizes = append(sizes, g.NumExperts, g.NumExpertsPerTok, g.MoeIntermediateSize, g.SharedExpertIntermediateSize)
		if g.NumExpertsPerTok > g.NumExperts {
			t.Fatalf("top-k %d > experts %d", g.NumExpertsPerTok, g.NumExperts)
		}
	case ArchDense:
		sizes = append(sizes, g.IntermediateSize)
	default:
		t.Fatalf("architecture %q accepted", arch)
	}
	for _, s := range sizes {
		if s <= 0 || s > maxConfigDim {
			t.Fatalf("size %d accepted in %+v", s, g)
		}
	}
	if len(g.LayerTypes) != g.NumLayers || g.HiddenAct != "silu" || !(g.RMSNormEps > 0) || !(g.RopeTheta > 0) ||
		g.NumAttentionHeads%g.NumKeyValueHeads != 0 || g.LinearNumValueHeads%g.LinearNumKeyHeads != 0 {
		t.Fatalf("accepted geometry %+v", g)
	}
	for _, lt := range g.LayerTypes {
		if lt != LinearAttention && lt != FullAttention {
			t.Fatalf("layer type %q accepted", lt)
		}
	}
	if rd := int(float64(g.HeadDim) * g.PartialRotaryFactor); rd < 2 || rd%2 != 0 || rd > g.HeadDim {
		t.Fatalf("rotary dim %d accepted", rd)
	}
}

// FuzzParseGenerationConfig checks that accepted token ids lie in the vocabulary.
func FuzzParseGenerationConfig(f *testing.F) {
	f.Add([]byte(`{"do_sample":true,"temperature":0.7,"top_p":0.95,"top_k":20,"eos_token_id":[4098,4096],"pad_token_id":4096}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		const vocab = 4160
		gc, err := ParseGenerationConfig(data, "fuzz.json", vocab)
		if err != nil {
			return
		}
		ids := slices.Clone(gc.EOSTokenIDs)
		for _, p := range []*int{gc.PadTokenID, gc.BOSTokenID} {
			if p != nil {
				ids = append(ids, *p)
			}
		}
		for _, id := range ids {
			if id < 0 || id >= vocab {
				t.Fatalf("token id %d accepted", id)
			}
		}
		if gc.TopP != nil && !(*gc.TopP > 0 && *gc.TopP <= 1) {
			t.Fatalf("top_p %v accepted", *gc.TopP)
		}
	})
}

// FuzzClassify checks that Classify never panics and that what it accepts
// has a canonical name and indices inside the geometry.
func FuzzClassify(f *testing.F) {
	f.Add("model.language_model.layers.3.mlp.experts.15.down_proj.weight")
	f.Add("model.layers.0.linear_attn.A_log")
	lin, full := LinearAttention, FullAttention
	g := packexperts.Geometry{NumLayers: 4, NumExperts: 16, LayerTypes: []string{lin, lin, lin, full}}
	f.Fuzz(func(t *testing.T, name string) {
		for _, arch := range []string{ArchMoE, ArchDense} {
			c, err := Classify(name, arch, &g)
			if err != nil {
				continue
			}
			if c.Layer >= g.NumLayers || c.Expert >= g.NumExperts || (c.Role == Expert && arch != ArchMoE) {
				t.Fatalf("Classify(%q, %s) = %+v", name, arch, c)
			}
			if c.Role == Resident && c.Canonical != lmHead && !strings.HasPrefix(c.Canonical, "model.") {
				t.Fatalf("canonical name %q for %q", c.Canonical, name)
			}
		}
	})
}
