package hf

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// fixtureConfig returns the tiny-moe config.json decoded, for a test to edit.
func fixtureConfig(t *testing.T) map[string]any {
	var cfg map[string]any
	if err := json.Unmarshal(loadFake(t, "tiny-moe-fused").files[ConfigFile], &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func text(cfg map[string]any) map[string]any { return cfg["text_config"].(map[string]any) }
func rope(cfg map[string]any) map[string]any { return text(cfg)["rope_parameters"].(map[string]any) }
func encode(t *testing.T, cfg map[string]any) []byte {
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parseEdited parses the fixture config after edit changed it.
func parseEdited(t *testing.T, edit func(cfg map[string]any)) (string, packexperts.Geometry) {
	t.Helper()
	cfg := fixtureConfig(t)
	edit(cfg)
	arch, g, err := ParseConfig(encode(t, cfg), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	return arch, g
}

// refusesEdited checks that the fixture config, after edit changed it, is
// refused with an error naming the file and containing want.
func refusesEdited(t *testing.T, edit func(cfg map[string]any), want string) {
	t.Helper()
	cfg := fixtureConfig(t)
	edit(cfg)
	_, _, err := ParseConfig(encode(t, cfg), "x/config.json")
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "x/config.json") {
		t.Errorf("got %v, want an error naming the file and containing %q", err, want)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	lin, full := LinearAttention, FullAttention
	cases := []struct {
		name  string
		edit  func(cfg map[string]any)
		check func(g packexperts.Geometry) bool
	}{
		{"layer_types from interval", func(c map[string]any) {
			delete(text(c), "layer_types")
			text(c)["full_attention_interval"] = 2
		}, func(g packexperts.Geometry) bool {
			return slices.Equal(g.LayerTypes, []string{lin, full, lin, full, lin, full, lin, full})
		}},
		{"layer_types default interval 4", func(c map[string]any) { delete(text(c), "layer_types") },
			func(g packexperts.Geometry) bool {
				return slices.Equal(g.LayerTypes, []string{lin, lin, lin, full, lin, lin, lin, full})
			}},
		{"rope_parameters partial_rotary_factor wins", func(c map[string]any) {
			text(c)["partial_rotary_factor"] = 0.5
			rope(c)["partial_rotary_factor"] = 0.25
		}, func(g packexperts.Geometry) bool { return g.PartialRotaryFactor == 0.25 }},
		{"top-level partial_rotary_factor", func(c map[string]any) {
			text(c)["partial_rotary_factor"] = 0.5
			delete(rope(c), "partial_rotary_factor")
		}, func(g packexperts.Geometry) bool { return g.PartialRotaryFactor == 0.5 }},
		{"partial_rotary_factor default", func(c map[string]any) {
			delete(text(c), "partial_rotary_factor")
			delete(rope(c), "partial_rotary_factor")
		}, func(g packexperts.Geometry) bool { return g.PartialRotaryFactor == 0.25 }},
		{"transformers 4 rope layout", func(c map[string]any) {
			delete(text(c), "rope_parameters")
			text(c)["rope_theta"] = 5e6
			text(c)["rope_scaling"] = map[string]any{"type": "mrope", "mrope_section": []int{2, 1, 1}}
		}, func(g packexperts.Geometry) bool { return g.RopeTheta == 5e6 }},
		{"eps, act, bias, tie defaults", func(c map[string]any) {
			for _, k := range []string{"rms_norm_eps", "hidden_act", "attention_bias", "tie_word_embeddings"} {
				delete(text(c), k)
			}
			delete(c, "tie_word_embeddings")
			delete(rope(c), "rope_type")
		}, func(g packexperts.Geometry) bool {
			return g.RMSNormEps == 1e-6 && g.HiddenAct == "silu" && !g.TieWordEmbeddings
		}},
		{"top-level tie applies to text", func(c map[string]any) {
			delete(text(c), "tie_word_embeddings")
			c["tie_word_embeddings"] = true
		}, func(g packexperts.Geometry) bool { return g.TieWordEmbeddings }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			arch, g := parseEdited(t, c.edit)
			if arch != ArchMoE || !c.check(g) {
				t.Errorf("arch %s geometry %+v", arch, g)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	set := func(k string, v any) func(map[string]any) { return func(c map[string]any) { text(c)[k] = v } }
	del := func(k string) func(map[string]any) { return func(c map[string]any) { delete(text(c), k) } }
	cases := []struct {
		name string
		edit func(cfg map[string]any)
		want string
	}{
		{"zero hidden", set("hidden_size", 0), "hidden_size is 0"},
		{"negative heads", set("num_attention_heads", -4), "num_attention_heads is -4"},
		{"huge vocab", set("vocab_size", 1<<40), "vocab_size is"},
		{"missing head_dim", del("head_dim"), "head_dim is missing"},
		{"missing experts", del("num_experts"), "num_experts is missing"},
		{"fractional size", set("hidden_size", 128.5), "hidden_size"},
		{"Hv not multiple of Hk", set("linear_num_value_heads", 3), "linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2"},
		{"Hq not multiple of Hkv", set("num_key_value_heads", 3), "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
		{"layer_types length", set("layer_types", []string{"full_attention"}), "layer_types has 1 entries but num_hidden_layers is 8"},
		{"layer_types value", set("layer_types", []string{"linear_attention", "linear_attention", "linear_attention", "sliding_attention", "linear_attention", "linear_attention", "linear_attention", "full_attention"}), `layer_types[3] is "sliding_attention"`},
		{"attention bias", set("attention_bias", true), "attention_bias"},
		{"hidden_act", set("hidden_act", "gelu"), `hidden_act "gelu"`},
		{"rope type", func(c map[string]any) { rope(c)["rope_type"] = "longrope" }, `rope_parameters.rope_type "longrope" is not supported`},
		{"rope theta", func(c map[string]any) { delete(rope(c), "rope_theta") }, "rope_theta"},
		{"odd rotary dim", func(c map[string]any) { rope(c)["partial_rotary_factor"] = 0.3 }, "partial_rotary_factor 0.3"},
		{"top-k over experts", set("num_experts_per_tok", 17), "num_experts_per_tok 17 exceeds num_experts 16"},
		{"interval zero", func(c map[string]any) { delete(text(c), "layer_types"); text(c)["full_attention_interval"] = 0 }, "full_attention_interval"},
		{"no text_config", func(c map[string]any) { delete(c, "text_config") }, "needs a text_config"},
		{"text model_type mismatch", set("model_type", "qwen3_5_text"), `text_config.model_type "qwen3_5_text" does not match`},
		{"tie mismatch", func(c map[string]any) { c["tie_word_embeddings"] = true }, "tie_word_embeddings is true at the top level but false"},
		{"unknown model_type", func(c map[string]any) { c["model_type"] = "qwen3_moe" }, `model_type "qwen3_moe" is not supported`},
		{"missing model_type", func(c map[string]any) { delete(c, "model_type") }, `model_type "" is not supported`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			refusesEdited(t, c.edit, c.want)
		})
	}
	for _, bad := range []string{"", "null", "[]", `{"model_type":`, `"qwen3_5"`} {
		if _, _, err := ParseConfig([]byte(bad), "config.json"); err == nil {
			t.Errorf("ParseConfig(%q) succeeded", bad)
		}
	}
}

func TestParseGenerationConfig(t *testing.T) {
	ok := []struct {
		json string
		eos  []int
	}{
		{`{"eos_token_id": 4098}`, []int{4098}},
		{`{"eos_token_id": [4098, 4096], "top_k": 0, "temperature": 0}`, []int{4098, 4096}},
		{`{"eos_token_id": null, "bos_token_id": null}`, nil},
		{`{}`, nil},
	}
	for _, c := range ok {
		gc, err := ParseGenerationConfig([]byte(c.json), "g.json", 4160)
		if err != nil || !slices.Equal(gc.EOSTokenIDs, c.eos) {
			t.Errorf("%s: %+v, %v; want eos %v", c.json, gc, err, c.eos)
		}
	}
	bad := []struct{ json, want string }{
		{`{"eos_token_id": "x"}`, "eos_token_id"},
		{`{"eos_token_id": [1.5]}`, "eos_token_id"},
		{`{"eos_token_id": -1}`, "eos_token_id[0] -1"},
		{`{"pad_token_id": 4160}`, "pad_token_id 4160"},
		{`{"top_p": 0}`, "top_p"},
		{`{"top_p": 1.5}`, "top_p"},
		{`{"top_k": -1}`, "top_k"},
		{`{"temperature": -0.5}`, "temperature"},
		{`{"do_sample": "yes"}`, "invalid JSON"},
		{`[]`, "not a JSON object"},
	}
	for _, c := range bad {
		_, err := ParseGenerationConfig([]byte(c.json), "g.json", 4160)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "g.json") {
			t.Errorf("%s: got %v, want an error containing %q", c.json, err, c.want)
		}
	}
}

func TestParseIndexErrors(t *testing.T) {
	cases := []struct{ json, want string }{
		{`{"weight_map": {}}`, "missing or empty"},
		{`{"metadata": {}}`, "missing or empty"},
		{`{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}`, `key "a" appears twice`},
		{`{"weight_map": {"a": 3}}`, `weight_map["a"]`},
		{`{"weight_map": []}`, "expected a JSON object"},
		{`{"weight_map": {"a": "x"}} {}`, "unexpected data"},
		{`{"weight_map": {"a": "x"`, "unexpected"}, // "unexpected EOF" before go1.27, "unexpected end of JSON input" since
		{`{"weight_map": {"a": "./x"}}`, "not a plain relative path"},
		{`{"weight_map": {"a": "x/"}}`, "not a plain relative path"},
		{"{\"weight_map\": {\"a\": \"x\\u0000\"}}", "NUL"},
		{"{\"weight_map\": {\"\xff\": \"x\"}}", "UTF-8"},
	}
	for _, c := range cases {
		_, err := ParseIndex([]byte(c.json), "idx.json")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "idx.json") {
			t.Errorf("%q: got %v, want an error containing %q", c.json, err, c.want)
		}
	}
	idx, err := ParseIndex([]byte(`{"metadata":{"total_size":3},"weight_map":{"a":"sub/x.safetensors","b":"a.safetensors","c":"a.safetensors"}}`), "idx.json")
	if err != nil || !slices.Equal(idx.Shards, []string{"a.safetensors", "sub/x.safetensors"}) {
		t.Errorf("got %+v, %v", idx, err)
	}
}
