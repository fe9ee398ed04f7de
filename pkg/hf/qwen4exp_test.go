package hf

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

func TestQwen4ExpFixturesOpen(t *testing.T) {
	for _, name := range []string{"tiny-qwen38-perexpert", "tiny-qwen38-fused"} {
		s, err := Open(testfix.Shared(t, "dev/"+name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		q := s.Geometry.Qwen4Exp
		if s.Architecture != ArchQwen4Exp || q == nil || len(s.NGram) != 1 {
			t.Fatalf("%s: %s %+v %d tables", name, s.Architecture, q, len(s.NGram))
		}
		// Values from the fixtures README and q38 §1.2 / §3.4 (tiny column).
		if q.HCCount != 4 || q.HCLowRank != 16 || q.PLELayers[0] != 1 || q.PLEResetTokenID != 4096 || q.OutputGateType != "sigmoid" ||
			q.IndexerNHeads != 8 || q.IndexerBudget != 8 || s.Geometry.PartialRotaryFactor != 0.25 || s.Geometry.LayerTypes[3] != FullAttention {
			t.Errorf("%s: geometry %+v %+v", name, s.Geometry, *q)
		}
		tab := s.NGram[0]
		if tab.Rows != 16896 || tab.RowWidth != 4 || tab.Multipliers[0] != 1523712965244179 || tab.Multipliers[2] != 2102351738803459 ||
			tab.VocabSizes[0] != 1009 || tab.VocabSizes[15] != 1097 {
			t.Errorf("%s: table %+v", name, tab)
		}
	}
}

// The release constants of q38 §3.4, recomputed.
func TestQwen4ExpReleaseConstants(t *testing.T) {
	q := &packexperts.Qwen4ExpGeometry{PLELayers: []int{1}, PLEEmbedDim: 2560, NGramSize: 3, HeadsPerNGram: 8,
		NGramVocabSizeBase: 20_000_000, NGramVocabSizeDivisibleBy: 128, Seed: 1234}
	c, err := packexperts.ComputeNGramConstants(q, 248320, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{23703573157769, 20109073645365, 8052911324071}
	for i, m := range want {
		if c.Multipliers[i] != m {
			t.Errorf("m_%d = %d, want %d", i, c.Multipliers[i], m)
		}
	}
	if c.VocabSizes[0] != 20000003 || c.VocabSizes[15] != 20000171 || c.Offsets[2] != 40000026 || c.Offsets[15] != 300001275 || c.Rows != 320001536 {
		t.Errorf("primes %v offsets %v rows %d", c.VocabSizes, c.Offsets, c.Rows)
	}
	q.PLELayers = []int{1, 5}
	c1, _ := packexperts.ComputeNGramConstants(q, 248320, 1)
	if c1.VocabSizes[0] != 20000213 {
		t.Errorf("second PLE layer starts at prime %d, want 20000213 (q38 §9)", c1.VocabSizes[0])
	}
}

// q38Config returns the fused fixture's config.json as a map to edit.
func q38Config(t testing.TB) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(testfix.Shared(t, "dev/tiny-qwen38-fused/config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Each 5.17 validation rule (q38 §1.3) and each limit is an error naming
// the field.
func TestQwen4ExpConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		edit func(tc map[string]any)
		want string // "" = accepted
	}{
		{"fixture", func(map[string]any) {}, ""},
		{"sparse attention spelling", func(tc map[string]any) {
			tc["layer_types"] = []any{"linear_attention", "linear_attention", "linear_attention", "qwen_sparse_attention",
				"linear_attention", "linear_attention", "linear_attention", "qwen_sparse_attention"}
		}, ""},
		{"no layer_types", func(tc map[string]any) { delete(tc, "layer_types") }, ""},
		{"eos list", func(tc map[string]any) { tc["eos_token_id"] = []any{4096, 4098} }, ""},
		{"unknown layer type", func(tc map[string]any) { tc["layer_types"].([]any)[3] = "indexed_attention" }, "layer_types[3] is \"indexed_attention\""},
		{"output gate", func(tc map[string]any) { tc["output_gate_type"] = "tanh" }, "output_gate_type \"tanh\""},
		{"one stream", func(tc map[string]any) { tc["hc_count"] = 1 }, "hc_count 1 must be greater than 1"},
		{"too many streams", func(tc map[string]any) { tc["hc_count"] = 1000 }, "hc_count is 1000"},
		{"top-k over experts", func(tc map[string]any) { tc["num_experts_per_tok"] = 17 }, "num_experts_per_tok 17 exceeds num_experts 16"},
		{"no expert width", func(tc map[string]any) { tc["moe_intermediate_size"] = 0 }, "moe_intermediate_size is 0"},
		{"indexer missing", func(tc map[string]any) { delete(tc, "indexer_budget") }, "indexer_budget is missing"},
		{"indexer null", func(tc map[string]any) { tc["indexer_n_heads"] = nil }, "indexer_n_heads is missing"},
		{"indexer kv heads", func(tc map[string]any) { tc["indexer_kv_heads"] = 2 }, "indexer_kv_heads 2 must be 1"},
		{"budget not blocks", func(tc map[string]any) { tc["indexer_budget"] = 10 }, "indexer_budget 10 is not a multiple of indexer_compress_ratio 4"},
		{"rotary over indexer dim", func(tc map[string]any) { tc["indexer_head_dim"] = 4 }, "indexer_head_dim 4 is smaller than the rotary dim 8"},
		{"ple id zero", func(tc map[string]any) { tc["ple_layer_ids"] = []any{0} }, "ple_layer_ids holds 0"},
		{"ple id past layers", func(tc map[string]any) { tc["ple_layer_ids"] = []any{9} }, "ple_layer_ids holds 9"},
		{"ple on attention", func(tc map[string]any) { tc["ple_layer_ids"] = []any{4} }, "layer 3 is full_attention"},
		{"ple width", func(tc map[string]any) { tc["ple_embed_dim"] = 60 }, "ple_embed_dim 60 is not a multiple of"},
		{"no eos with ple", func(tc map[string]any) { delete(tc, "eos_token_id") }, "eos_token_id is missing"},
		{"eos outside vocab", func(tc map[string]any) { tc["eos_token_id"] = 5000 }, "eos_token_id 5000 is outside the vocabulary"},
		{"ngram size", func(tc map[string]any) { tc["ngram_size"] = 1 }, "ngram_size 1 must be at least 2"},
		{"vocab base", func(tc map[string]any) { tc["ngram_vocab_size_base"] = int64(1) << 40 }, "ngram_vocab_size_base is 1099511627776"},
		{"divisor", func(tc map[string]any) { tc["make_ngram_vocab_size_divisible_by"] = 0 }, "make_ngram_vocab_size_divisible_by is 0"},
		{"split parts", func(tc map[string]any) { tc["split_ngram_parts"] = -1 }, "split_ngram_parts is -1"},
		{"attention bias", func(tc map[string]any) { tc["attention_bias"] = true }, "attention_bias is true"},
		{"text model type", func(tc map[string]any) { tc["model_type"] = "qwen3_5_moe_text" }, "text_config.model_type \"qwen3_5_moe_text\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := q38Config(t)
			c.edit(cfg["text_config"].(map[string]any))
			raw, _ := json.Marshal(cfg)
			arch, g, err := ParseConfig(raw, "config.json")
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want == "":
				if arch != ArchQwen4Exp || g.Validate(arch) != nil {
					t.Fatalf("%s %v", arch, g.Validate(arch))
				}
			case err == nil:
				t.Fatalf("accepted, want an error saying %q", c.want)
			case !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "config.json: "):
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// 5.17's defaults where qwen4_exp differs from qwen3_5 (q38 §1.3): no
// rope_parameters ⇒ θ 10000 and a partial rotary factor of 1.0.
func TestQwen4ExpRopeDefaults(t *testing.T) {
	cfg := q38Config(t)
	tc := cfg["text_config"].(map[string]any)
	delete(tc, "rope_parameters")
	delete(tc, "partial_rotary_factor")
	tc["indexer_head_dim"] = 32
	raw, _ := json.Marshal(cfg)
	_, g, err := ParseConfig(raw, "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if g.RopeTheta != 10000 || g.PartialRotaryFactor != 1 {
		t.Errorf("theta %v, partial rotary factor %v; want 10000 and 1", g.RopeTheta, g.PartialRotaryFactor)
	}
}

// The text-only form (fields at the top level) parses to the same geometry.
func TestQwen4ExpTextOnlyConfig(t *testing.T) {
	cfg := q38Config(t)
	nested, _ := json.Marshal(cfg)
	flat, _ := json.Marshal(cfg["text_config"])
	_, a, err := ParseConfig(nested, "a")
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := ParseConfig(flat, "b")
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("nested %s\nflat   %s", ja, jb)
	}
}

// FuzzParseQwen4ExpConfig: the parser never panics, and whatever it accepts
// is a geometry the install format accepts, whose n-gram tables can be
// planned within the ceilings.
func FuzzParseQwen4ExpConfig(f *testing.F) {
	raw, err := os.ReadFile("../../../shared/fixtures/dev/tiny-qwen38-fused/config.json")
	if err == nil {
		f.Add(raw)
	}
	f.Add([]byte(`{"model_type":"qwen4_exp_text","vocab_size":64,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":1,"num_key_value_heads":1,"head_dim":8,"max_position_embeddings":8,"linear_conv_kernel_dim":2,"linear_num_key_heads":1,"linear_num_value_heads":1,"linear_key_head_dim":4,"linear_value_head_dim":4,"num_experts":2,"num_experts_per_tok":1,"moe_intermediate_size":4,"shared_expert_intermediate_size":4,"indexer_n_heads":1,"indexer_kv_heads":1,"indexer_head_dim":8,"indexer_budget":4,"indexer_compress_ratio":2,"ple_layer_ids":[1],"ple_embed_dim":16,"eos_token_id":[3],"ngram_vocab_size_base":10,"seed":-5}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		arch, g, err := ParseConfig(data, "fuzz.json")
		if err != nil || arch != ArchQwen4Exp {
			return
		}
		if err := g.Validate(arch); err != nil {
			t.Fatalf("accepted a geometry the manifest refuses: %v", err)
		}
		if g.Qwen4Exp.NGramVocabSizeBase > 1<<20 {
			return // prime search cost; bounded, but slow under the fuzzer
		}
		for k := range g.Qwen4Exp.PLELayers {
			if _, err := packexperts.PlanNGram(&g, k); err != nil {
				return
			}
		}
	})
}

// FuzzClassifyQwen4Exp: Classify never panics on qwen4_exp names, and what
// it accepts lies inside the geometry, with n-gram tensors only on the PLE
// layer.
func FuzzClassifyQwen4Exp(f *testing.F) {
	for _, n := range []string{
		"model.language_model.layers.1.ple.ple_embedding.ngram_embedding.shard_3.weight",
		"model.language_model.layers.1.ple.ple_embedding.layer_multipliers",
		"model.layers.3.self_attn.indexer.index_qk_proj.weight",
		"model.language_model.hyper_connection_mixer.hc_norm.weight",
		"model.language_model.layers.2.mlp_hyper_connection.block_inject_weight.weight",
		"model.language_model.layers.0.mlp.experts.gate_up_proj",
	} {
		f.Add(n)
	}
	lin, full := LinearAttention, FullAttention
	g := packexperts.Geometry{NumLayers: 4, NumExperts: 16, LayerTypes: []string{lin, lin, lin, full},
		Qwen4Exp: &packexperts.Qwen4ExpGeometry{PLELayers: []int{1}}}
	f.Fuzz(func(t *testing.T, name string) {
		c, err := Classify(name, ArchQwen4Exp, &g)
		if err != nil {
			return
		}
		if c.Layer >= g.NumLayers || c.Expert >= g.NumExperts {
			t.Fatalf("Classify(%q) = %+v", name, c)
		}
		if (c.Role == NGramTable || c.Role == NGramBuffer) && c.Layer != 1 {
			t.Fatalf("n-gram tensor %q on layer %d", name, c.Layer)
		}
		if c.Role == Resident && c.Canonical != lmHead && !strings.HasPrefix(c.Canonical, "model.") {
			t.Fatalf("canonical name %q for %q", c.Canonical, name)
		}
		if c.Role == Resident && strings.Contains(c.Canonical, "ple.") && c.Layer != 1 {
			t.Fatalf("PLE tensor %q on layer %d", name, c.Layer)
		}
	})
}
