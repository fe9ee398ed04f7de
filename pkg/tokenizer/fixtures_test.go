package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fixturesDir finds shared/fixtures/dev beside the repository root (the
// directory holding go.mod), and skips the test when it is absent.
func fixturesDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Skip("fixtures: no go.mod above the package directory, so ../shared/fixtures cannot be found")
		}
		dir = parent
	}
	fx := filepath.Join(dir, "..", "shared", "fixtures", "dev")
	if _, err := os.Stat(fx); err != nil {
		tb.Skipf("fixtures: %s is absent (the reference fixtures live in ../shared/fixtures beside the repository): %v", fx, err)
	}
	return fx
}

var (
	fixtureTokenizersMu sync.Mutex
	fixtureTokenizers   = map[string]*Tokenizer{}
)

// fixtureTokenizer loads the tokenizer of one fixture snapshot
// (tiny-moe-fused or tiny-dense), once per test binary.
func fixtureTokenizer(tb testing.TB, snapshot string) *Tokenizer {
	tb.Helper()
	dir := filepath.Join(fixturesDir(tb), snapshot)
	fixtureTokenizersMu.Lock()
	defer fixtureTokenizersMu.Unlock()
	if tok, ok := fixtureTokenizers[dir]; ok {
		return tok
	}
	tok, err := Load(filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		tb.Fatalf("Load %s: %v", snapshot, err)
	}
	fixtureTokenizers[dir] = tok
	return tok
}

func readFixtureJSON(tb testing.TB, name string, v any) {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(fixturesDir(tb), name))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
}

type tokenizerCase struct {
	Text    string `json:"text"`
	IDs     []int  `json:"ids"`
	Decoded string `json:"decoded"`
}

func tokenizerCases(tb testing.TB) []tokenizerCase {
	var cases []tokenizerCase
	readFixtureJSON(tb, "tokenizer-cases.json", &cases)
	if len(cases) == 0 {
		tb.Fatal("tokenizer-cases.json has no cases")
	}
	return cases
}

// TestFixtureCases checks every case of tokenizer-cases.json (transformers'
// own ids and decoded text).
func TestFixtureCases(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	for _, c := range tokenizerCases(t) {
		t.Run(c.Text, func(t *testing.T) {
			if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
				t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
			}
			if got := tok.Decode(c.IDs); got != c.Decoded {
				t.Errorf("Decode(%v) = %q, want %q", c.IDs, got, c.Decoded)
			}
			if got := streamAll(tok, c.IDs, DecodeOptions{}); got != c.Decoded {
				t.Errorf("stream decode of %v = %q, want %q", c.IDs, got, c.Decoded)
			}
		})
	}
}

type refsFile struct {
	Prompts []struct {
		Text       string `json:"text"`
		IDs        []int  `json:"ids"`
		Greedy     []int  `json:"greedy"`
		GreedyText string `json:"greedy_text"`
	} `json:"prompts"`
}

// TestFixtureRefs checks each prompt's ids and the decoded text of each
// greedy continuation in the reference files. The continuations include
// <|endoftext|> and, for tiny-dense, ids past the tokenizer (padding rows of
// the embedding), which decode to nothing.
func TestFixtureRefs(t *testing.T) {
	for _, fx := range []struct{ refs, snapshot string }{
		{"tiny-moe.refs.json", "tiny-moe-fused"},
		{"tiny-dense.refs.json", "tiny-dense"},
	} {
		t.Run(fx.snapshot, func(t *testing.T) {
			tok := fixtureTokenizer(t, fx.snapshot)
			var refs refsFile
			readFixtureJSON(t, fx.refs, &refs)
			if len(refs.Prompts) == 0 {
				t.Fatalf("%s has no prompts", fx.refs)
			}
			for i, p := range refs.Prompts {
				if got := tok.Encode(p.Text); !slices.Equal(got, p.IDs) {
					t.Errorf("prompt %d: Encode(%.40q…)\n got %v\nwant %v", i, p.Text, got, p.IDs)
				}
				if got := tok.Decode(p.IDs); got != p.Text {
					t.Errorf("prompt %d: Decode(ids) = %.60q, want %.60q", i, got, p.Text)
				}
				if got := tok.Decode(p.Greedy); got != p.GreedyText {
					t.Errorf("prompt %d: Decode(greedy) = %q, want %q", i, got, p.GreedyText)
				}
				if got := streamAll(tok, p.Greedy, DecodeOptions{}); got != p.GreedyText {
					t.Errorf("prompt %d: stream decode of greedy = %q, want %q", i, got, p.GreedyText)
				}
			}
		})
	}
}

// TestFixtureSkipSpecial: the tiny-moe continuations contain <|endoftext|>
// (special); skipping it removes exactly that text.
func TestFixtureSkipSpecial(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	var refs refsFile
	readFixtureJSON(t, "tiny-moe.refs.json", &refs)
	eot, ok := tok.TokenID("<|endoftext|>")
	if !ok || !tok.IsSpecial(eot) {
		t.Fatalf("TokenID(<|endoftext|>) = %d, %v; IsSpecial = %v", eot, ok, tok.IsSpecial(eot))
	}
	checked := 0
	for _, p := range refs.Prompts {
		if !slices.Contains(p.Greedy, eot) {
			continue
		}
		want := strings.ReplaceAll(p.GreedyText, "<|endoftext|>", "")
		opts := DecodeOptions{SkipSpecialTokens: true}
		if got := tok.DecodeWithOptions(p.Greedy, opts); got != want {
			t.Errorf("DecodeWithOptions(skip special) = %q, want %q", got, want)
		}
		if got := streamAll(tok, p.Greedy, opts); got != want {
			t.Errorf("stream decode (skip special) = %q, want %q", got, want)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no greedy continuation holds <|endoftext|>; the test checks nothing")
	}
}

// TestFixtureTokenIDs checks the added tokens the fixture README lists and
// that non-special added tokens stay in skip-special decoding.
func TestFixtureTokenIDs(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	for _, tt := range []struct {
		content string
		id      int
		special bool
	}{
		{"<|endoftext|>", 4096, true},
		{"<|im_start|>", 4097, true},
		{"<|im_end|>", 4098, true},
		{"<think>", 4099, false},
		{"</think>", 4100, false},
		{"<tool_call>", 4101, false},
		{"</tool_call>", 4102, false},
		{"Ġ", 220, false},
		{"Ċ", 198, false},
	} {
		id, ok := tok.TokenID(tt.content)
		if !ok || id != tt.id || tok.IsSpecial(id) != tt.special {
			t.Errorf("TokenID(%q) = %d, %v (special %v); want %d, special %v", tt.content, id, ok, tok.IsSpecial(id), tt.id, tt.special)
		}
	}
	if _, ok := tok.TokenID("<|no such token|>"); ok {
		t.Error("TokenID of an unknown string succeeded")
	}
	if got := tok.IDCount(); got != 4103 {
		t.Errorf("IDCount() = %d, want 4103 (4096 vocabulary entries + 7 added tokens)", got)
	}
	think := []int{4099, 198, 4100}
	if got := tok.DecodeWithOptions(think, DecodeOptions{SkipSpecialTokens: true}); got != "<think>\n</think>" {
		t.Errorf("skip-special decode of <think>\\n</think> = %q", got)
	}
}

// TestByteSymbolsMatchFixtureVocab checks the byte↔symbol rule against the
// fixture vocabulary, whose first 256 ids are the byte symbols in GPT-2
// order: the bytes that stand for themselves ascending, then the others.
func TestByteSymbolsMatchFixtureVocab(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	var order []int
	for b := range 256 {
		if (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174 {
			order = append(order, b)
		}
	}
	for b := range 256 {
		if !((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) {
			order = append(order, b)
		}
	}
	for id, b := range order {
		if got := tok.bpe.byteIDs[b]; int(got) != id {
			t.Errorf("byte %#02x (symbol %q): id %d, fixture vocabulary has it at %d", b, byteToSymbol[b], got, id)
		}
		if got := tok.Decode([]int{id}); b < 0x80 && got != string(rune(b)) {
			t.Errorf("Decode([%d]) = %q, want byte %#02x", id, got, b)
		}
	}
}

// TestChatPromptMatchesTemplate: the fixture's chat template is the plain
// ChatML one, and tokenizer-cases.json holds what transformers gives for the
// text it renders for one user message with add_generation_prompt=True.
func TestChatPromptMatchesTemplate(t *testing.T) {
	for _, snapshot := range []string{"tiny-moe-fused", "tiny-dense"} {
		if tok := fixtureTokenizer(t, snapshot); !tok.UsesPlainChatTemplate() {
			t.Errorf("%s: chat template is not PlainChatTemplate:\n%s", snapshot, tok.ChatTemplate())
		}
	}
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	const rendered = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
	msgs := []Message{{Role: "user", Content: "What is 2+2?"}}
	if got := ChatPrompt(msgs, true); got != rendered {
		t.Fatalf("ChatPrompt = %q, want %q", got, rendered)
	}
	var want []int
	for _, c := range tokenizerCases(t) {
		if c.Text == rendered {
			want = c.IDs
		}
	}
	if want == nil {
		t.Fatalf("tokenizer-cases.json has no case for %q", rendered)
	}
	if got := tok.EncodeChat(msgs, true); !slices.Equal(got, want) {
		t.Errorf("EncodeChat\n got %v\nwant %v", got, want)
	}
	// Without the generation prompt the template stops after <|im_end|>\n,
	// which is the fixture's ids up to and including the first 198 after
	// <|im_end|>.
	end := slices.Index(want, 4098)
	if got := tok.EncodeChat(msgs, false); !slices.Equal(got, want[:end+2]) {
		t.Errorf("EncodeChat without generation prompt\n got %v\nwant %v", got, want[:end+2])
	}
}

func TestChatPromptTurns(t *testing.T) {
	msgs := []Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Hi"},
		{Role: "assistant", Content: "Hello."},
		{Role: "user", Content: ""},
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n" +
		"<|im_start|>user\nHi<|im_end|>\n" +
		"<|im_start|>assistant\nHello.<|im_end|>\n" +
		"<|im_start|>user\n<|im_end|>\n"
	if got := ChatPrompt(msgs, false); got != want {
		t.Errorf("ChatPrompt(false) =\n%q\nwant\n%q", got, want)
	}
	if got := ChatPrompt(msgs, true); got != want+"<|im_start|>assistant\n" {
		t.Errorf("ChatPrompt(true) = %q", got)
	}
	if got := ChatPrompt(nil, true); got != "<|im_start|>assistant\n" {
		t.Errorf("ChatPrompt(nil, true) = %q", got)
	}
}

// streamAll decodes ids through a StreamDecoder, checking on the way that
// each Push returns valid UTF-8.
func streamAll(tok *Tokenizer, ids []int, opts DecodeOptions) string {
	d := tok.NewStreamDecoder(opts)
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d.Push(id))
	}
	b.WriteString(d.Flush())
	return b.String()
}
