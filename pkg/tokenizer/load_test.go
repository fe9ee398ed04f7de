package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/limits"
)

// gpt2ByteOrder lists the bytes in the order byte-level vocabularies give
// them ids: those that stand for themselves, then the 68 others.
func gpt2ByteOrder() []byte {
	var printable, others []byte
	for b := range 256 {
		if isPrintableByte(byte(b)) {
			printable = append(printable, byte(b))
		} else {
			others = append(others, byte(b))
		}
	}
	return append(printable, others...)
}

// byteID is the id of byte b in the synthetic vocabulary.
func byteID(b byte) int { return slices.Index(gpt2ByteOrder(), b) }

// Synthetic added tokens. Their ids follow the vocabulary in this order.
var syntheticAdded = []struct {
	content                                         string
	special, normalized, lstrip, rstrip, singleWord bool
}{
	{content: "<x>", special: true},
	{content: "<x>y"},
	{content: "[L]", lstrip: true},
	{content: "[R]", rstrip: true},
	{content: "word", singleWord: true},
	{content: "qr"},
	{content: "rst"},
	{content: "e\u0301", normalized: true}, // matched as NFC "é" on normalised text
	{content: "o\u0308"},                   // matched as is, before NFC
}

// syntheticTokenizer returns a small valid tokenizer.json of the Qwen3.5
// structure as a generic JSON value, for tests to mutate.
func syntheticTokenizer() map[string]any {
	vocab := map[string]any{}
	for id, b := range gpt2ByteOrder() {
		vocab[string(byteToSymbol[b])] = id
	}
	merges := [][]string{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "hello"}}
	next := 256
	for _, m := range merges {
		vocab[m[0]+m[1]] = next
		next++
	}
	var added []any
	for i, a := range syntheticAdded {
		added = append(added, map[string]any{
			"id": next + i, "content": a.content, "special": a.special, "normalized": a.normalized,
			"lstrip": a.lstrip, "rstrip": a.rstrip, "single_word": a.singleWord,
		})
	}
	return map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwenSplitPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges,
		},
	}
}

// syntheticIDs: the vocabulary has 256 bytes and 5 merges, then the added
// tokens.
const syntheticVocabLen = 256 + 5

func syntheticAddedID(content string) int {
	for i, a := range syntheticAdded {
		if a.content == content {
			return syntheticVocabLen + i
		}
	}
	panic("no synthetic added token " + content)
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func parseSynthetic(tb testing.TB, mutate func(map[string]any)) (*Tokenizer, error) {
	tb.Helper()
	doc := syntheticTokenizer()
	if mutate != nil {
		mutate(doc)
	}
	return Parse(mustJSON(tb, doc), nil)
}

func obj(v any) map[string]any { return v.(map[string]any) }

func preStep(doc map[string]any, i int) map[string]any {
	return obj(obj(doc["pre_tokenizer"])["pretokenizers"].([]any)[i])
}

func model(doc map[string]any) map[string]any { return obj(doc["model"]) }

func addedAt(doc map[string]any, i int) map[string]any { return obj(doc["added_tokens"].([]any)[i]) }

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(map[string]any)
		field  string
	}{
		{"unknown version", func(d map[string]any) { d["version"] = "2.0" }, "version"},
		{"normalizer NFKC", func(d map[string]any) { d["normalizer"] = map[string]any{"type": "NFKC"} }, "normalizer.type"},
		{"normalizer sequence", func(d map[string]any) {
			d["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{}}
		}, "normalizer.type"},
		{"pre-tokenizer is plain ByteLevel", func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false}
		}, "pre_tokenizer.type"},
		{"pre-tokenizer missing", func(d map[string]any) { d["pre_tokenizer"] = nil }, "pre_tokenizer"},
		{"pre-tokenizer has three steps", func(d map[string]any) {
			p := obj(d["pre_tokenizer"])
			p["pretokenizers"] = append(p["pretokenizers"].([]any), map[string]any{"type": "Digits"})
		}, "pre_tokenizer.pretokenizers"},
		{"Qwen2 regex without marks", func(d map[string]any) {
			preStep(d, 0)["pattern"] = map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
		}, "pre_tokenizer.pretokenizers[0].pattern.Regex"},
		{"split on a string", func(d map[string]any) {
			preStep(d, 0)["pattern"] = map[string]any{"String": " "}
		}, "pre_tokenizer.pretokenizers[0].pattern"},
		{"split behavior Removed", func(d map[string]any) { preStep(d, 0)["behavior"] = "Removed" }, "pre_tokenizer.pretokenizers[0].behavior"},
		{"split inverted", func(d map[string]any) { preStep(d, 0)["invert"] = true }, "pre_tokenizer.pretokenizers[0].invert"},
		{"steps swapped", func(d map[string]any) {
			p := obj(d["pre_tokenizer"])
			s := p["pretokenizers"].([]any)
			s[0], s[1] = s[1], s[0]
		}, "pre_tokenizer.pretokenizers[0].type"},
		{"byte level adds a prefix space", func(d map[string]any) { preStep(d, 1)["add_prefix_space"] = true }, "pre_tokenizer.pretokenizers[1].add_prefix_space"},
		{"byte level use_regex defaults to true", func(d map[string]any) { delete(preStep(d, 1), "use_regex") }, "pre_tokenizer.pretokenizers[1].use_regex"},
		{"template post-processor", func(d map[string]any) {
			d["post_processor"] = map[string]any{"type": "TemplateProcessing"}
		}, "post_processor.type"},
		{"decoder WordPiece", func(d map[string]any) { d["decoder"] = map[string]any{"type": "WordPiece"} }, "decoder.type"},
		{"decoder missing", func(d map[string]any) { delete(d, "decoder") }, "decoder"},
		{"model WordPiece", func(d map[string]any) { model(d)["type"] = "WordPiece" }, "model.type"},
		{"model missing", func(d map[string]any) { delete(d, "model") }, "model"},
		{"byte fallback", func(d map[string]any) { model(d)["byte_fallback"] = true }, "model.byte_fallback"},
		{"dropout", func(d map[string]any) { model(d)["dropout"] = 0.1 }, "model.dropout"},
		{"subword prefix", func(d map[string]any) { model(d)["continuing_subword_prefix"] = "##" }, "model.continuing_subword_prefix"},
		{"word suffix", func(d map[string]any) { model(d)["end_of_word_suffix"] = "</w>" }, "model.end_of_word_suffix"},
		{"vocab id repeated", func(d map[string]any) { obj(model(d)["vocab"])["he"] = 0 }, "model.vocab["},
		{"vocab id out of range", func(d map[string]any) { obj(model(d)["vocab"])["he"] = 100000 }, `model.vocab["he"]`},
		{"vocab id negative", func(d map[string]any) { obj(model(d)["vocab"])["he"] = -1 }, `model.vocab["he"]`},
		{"vocab not an object", func(d map[string]any) { model(d)["vocab"] = []any{"a"} }, "model.vocab"},
		{"byte symbol missing", func(d map[string]any) {
			v := obj(model(d)["vocab"])
			id := v["Ġ"]
			delete(v, "Ġ")
			v["not a symbol"] = id
		}, "model.vocab"},
		{"merge part not in vocab", func(d map[string]any) {
			model(d)["merges"] = [][]string{{"h", "e"}, {"zz", "e"}}
		}, "model.merges[1]"},
		{"merged token not in vocab", func(d map[string]any) {
			model(d)["merges"] = [][]string{{"x", "y"}}
		}, "model.merges[0]"},
		{"merge of three parts", func(d map[string]any) { model(d)["merges"] = []any{[]string{"h", "e", "l"}} }, "model.merges[0]"},
		{"legacy merge of three parts", func(d map[string]any) { model(d)["merges"] = []any{"h e l"} }, "model.merges[0]"},
		{"merges missing", func(d map[string]any) { delete(model(d), "merges") }, "model.merges"},
		{"added token without lstrip", func(d map[string]any) { delete(addedAt(d, 0), "lstrip") }, "added_tokens[0].lstrip"},
		{"added token without id", func(d map[string]any) { delete(addedAt(d, 2), "id") }, "added_tokens[2].id"},
		{"added token with empty content", func(d map[string]any) { addedAt(d, 1)["content"] = "" }, "added_tokens[1].content"},
		{"added token listed twice", func(d map[string]any) { addedAt(d, 1)["content"] = "<x>" }, "added_tokens[1].content"},
		{"added token id out of order", func(d map[string]any) {
			addedAt(d, 0)["id"], addedAt(d, 1)["id"] = addedAt(d, 1)["id"], addedAt(d, 0)["id"]
		}, "added_tokens[0].id"},
		{"added token in vocab with another id", func(d map[string]any) {
			addedAt(d, 0)["content"] = "he"
		}, "added_tokens[0].id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseSynthetic(t, tt.mutate)
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FormatError for field %s", err, tt.field)
			}
			// A field ending in "[" stands for any key: which of two entries
			// with the same id is named depends on map order.
			if fe.File != "tokenizer.json" || !(fe.Field == tt.field || strings.HasSuffix(tt.field, "[") && strings.HasPrefix(fe.Field, tt.field)) {
				t.Errorf("error names %s / %s, want tokenizer.json / %s (%v)", fe.File, fe.Field, tt.field, err)
			}
			if !strings.HasPrefix(err.Error(), "tokenizer.json: "+fe.Field+": ") {
				t.Errorf("message %q does not start with the file and field", err)
			}
		})
	}
}

func TestParseRefusesMalformedJSON(t *testing.T) {
	for _, in := range []string{"", "{", "[]", `{"model": 3}`, "null"} {
		if _, err := Parse([]byte(in), nil); err == nil {
			t.Errorf("Parse(%q) succeeded", in)
		} else if !strings.HasPrefix(err.Error(), "tokenizer.json: ") {
			t.Errorf("Parse(%q): %v does not name the file", in, err)
		}
	}
}

func TestParseAccepts(t *testing.T) {
	// "hello" merges all the way: h+e, l+l, he+ll, hell+o.
	hello := []int{259}
	tests := []struct {
		name   string
		mutate func(map[string]any)
		want   []int
	}{
		{"as built", nil, hello},
		{"legacy merges", func(d map[string]any) {
			model(d)["merges"] = []any{"#version: 0.2", "h e", "l l", "he ll", "hell o", "Ġ hello"}
		}, hello},
		{"ByteLevel post-processor", func(d map[string]any) {
			d["post_processor"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
		}, hello},
		{"null normalizer", func(d map[string]any) { d["normalizer"] = nil }, hello},
		{"zero dropout", func(d map[string]any) { model(d)["dropout"] = 0.0 }, hello},
		{"added token that is a vocab entry", func(d map[string]any) {
			d["added_tokens"] = append(d["added_tokens"].([]any), map[string]any{
				"id": 256, "content": "he", "special": false, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false,
			})
			// Added tokens are split off first, so "he" no longer merges on.
		}, []int{256, 257, byteID('o')}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := parseSynthetic(t, tt.mutate)
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.Encode("hello"); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(hello) = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAddedTokenMatching follows AddedVocabulary.find_matches of the
// tokenizers library; the ids of plain text are single bytes here (the
// synthetic merges only join h, e, l, o).
func TestAddedTokenMatching(t *testing.T) {
	tok, err := parseSynthetic(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := func(s string) []int {
		var ids []int
		for i := 0; i < len(s); i++ {
			ids = append(ids, byteID(s[i]))
		}
		return ids
	}
	a := syntheticAddedID
	cat := func(parts ...[]int) []int { return slices.Concat(parts...) }
	tests := []struct {
		name string
		in   string
		want []int
	}{
		{"longest at a position", "<x>yz", cat([]int{a("<x>y")}, b("z"))},
		{"shorter when the longer does not fit", "<x>z", cat([]int{a("<x>")}, b("z"))},
		{"leftmost before longer", "qrst", cat([]int{a("qr")}, b("st"))},
		{"lstrip takes spaces before", "a  [L]b", cat(b("a"), []int{a("[L]")}, b("b"))},
		{"lstrip stops at the previous match", "[R] [L]", []int{a("[R]"), a("[L]")}},
		{"rstrip takes spaces after", "a[R]  b", cat(b("a"), []int{a("[R]")}, b("b"))},
		{"rstrip then lstrip", "a [R] [L] b", cat(b("a "), []int{a("[R]"), a("[L]")}, b(" b"))},
		{"single word alone", "word x", cat([]int{a("word")}, b(" x"))},
		{"single word in parentheses", "(word)", cat(b("("), []int{a("word")}, b(")"))},
		{"single word inside a word", "aword", b("aword")},
		{"single word before an underscore", "word_", b("word_")},
		{"single word before a digit", "word1", b("word1")},
		{"normalized token on NFC text", "cafe\u0301", cat(b("caf"), []int{a("e\u0301")})},
		{"normalized token on composed input", "caf\u00e9", cat(b("caf"), []int{a("e\u0301")})},
		{"raw token before NFC", "xo\u0308", cat(b("x"), []int{a("o\u0308")})},
		{"raw token not on composed input", "x\u00f6", b("x\u00f6")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tok.Encode(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("Encode(%q)\n got %v\nwant %v", tt.in, got, tt.want)
			}
		})
	}
}

// TestNullNormalizer: without NFC a decomposed character stays decomposed.
// (a + U+0301, since the synthetic e + U+0301 is an added token.)
func TestNullNormalizer(t *testing.T) {
	tok, err := parseSynthetic(t, func(d map[string]any) { d["normalizer"] = nil })
	if err != nil {
		t.Fatal(err)
	}
	in := "na\u0301"
	if got := tok.Decode(tok.Encode(in)); got != in {
		t.Errorf("round trip %q, want %q", got, in)
	}
	if got := len(tok.Encode(in)); got != len(in) {
		t.Errorf("%d ids, want one per byte (%d)", got, len(in))
	}
	nfc, err := parseSynthetic(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	composed := "n\u00e1"
	if got := nfc.Decode(nfc.Encode(in)); got != composed {
		t.Errorf("with NFC: round trip %q, want %q", got, composed)
	}
}

// TestLegacyMergesMatchFixture rewrites the fixture's merges in the older
// "a b" form and checks the fixture cases still encode the same.
func TestLegacyMergesMatchFixture(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixturesDir(t), "tiny-moe-fused", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var legacy []any
	for _, m := range model(doc)["merges"].([]any) {
		pair := m.([]any)
		legacy = append(legacy, pair[0].(string)+" "+pair[1].(string))
	}
	model(doc)["merges"] = legacy
	tok, err := Parse(mustJSON(t, doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tokenizerCases(t) {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q) with legacy merges\n got %v\nwant %v", c.Text, got, c.IDs)
		}
	}
}

func TestConfig(t *testing.T) {
	valid := mustJSON(t, syntheticTokenizer())
	tests := []struct {
		name     string
		config   string
		template string
		field    string // "" when the config is valid
	}{
		{"empty", `{}`, "", ""},
		{"string template", `{"chat_template": "T", "eos_token": "<x>", "pad_token": {"content": "qr"}, "bos_token": null}`, "T", ""},
		{"named templates", `{"chat_template": [{"name": "tool_use", "template": "U"}, {"name": "default", "template": "D"}]}`, "D", ""},
		{"consistent added_tokens_decoder", `{"added_tokens_decoder": {"261": {"content": "<x>", "special": true}}}`, "", ""},
		{"template not text", `{"chat_template": 3}`, "", "chat_template"},
		{"unknown eos", `{"eos_token": "<|im_end|>"}`, "", "eos_token"},
		{"eos not a token", `{"eos_token": 7}`, "", "eos_token"},
		{"decoder id disagrees", `{"added_tokens_decoder": {"262": {"content": "<x>"}}}`, "", `added_tokens_decoder["262"]`},
		{"decoder key not an id", `{"added_tokens_decoder": {"x": {"content": "<x>"}}}`, "", `added_tokens_decoder["x"]`},
		{"not JSON", `{`, "", "(top level)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Parse(valid, []byte(tt.config))
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tok.ChatTemplate() != tt.template {
					t.Errorf("ChatTemplate() = %q, want %q", tok.ChatTemplate(), tt.template)
				}
				if tok.UsesPlainChatTemplate() {
					t.Errorf("UsesPlainChatTemplate() with template %q", tt.template)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != "tokenizer_config.json" || fe.Field != tt.field {
				t.Errorf("err = %v, want a FormatError for tokenizer_config.json / %s", err, tt.field)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(good, mustJSON(t, syntheticTokenizer()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good, ""); err != nil {
		t.Fatalf("Load without a config: %v", err)
	}

	missing := filepath.Join(dir, "absent.json")
	if _, err := Load(missing, ""); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load of a missing file: %v, want an error naming %s", err, missing)
	}

	// A sparse file one byte over the limit: refused before it is read.
	huge := filepath.Join(dir, "huge.json")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(limits.TokenizerJSON + 1); err != nil {
		t.Skipf("cannot make a sparse file: %v", err)
	}
	f.Close()
	var fe *FormatError
	if _, err := Load(huge, ""); !errors.As(err, &fe) || fe.File != huge || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Load of an oversized tokenizer.json: %v", err)
	}
	if _, err := Load(good, huge); !errors.As(err, &fe) || fe.File != huge {
		t.Errorf("Load of an oversized tokenizer_config.json: %v", err)
	}

	badConfig := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(badConfig, []byte(`{"eos_token": "<nope>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good, badConfig); !errors.As(err, &fe) || fe.File != badConfig || fe.Field != "eos_token" {
		t.Errorf("Load with a bad config: %v", err)
	}
}
