package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// The rule of qwen35-architecture.md §5 step 4, spot-checked at its edges.
func TestByteSymbols(t *testing.T) {
	tests := []struct {
		b    byte
		want rune
	}{
		{0x00, 0x100}, {'\t', 0x109}, {'\n', 0x10A}, {' ', 0x120},
		{'!', '!'}, {'~', '~'},
		{0x7F, 0x121}, {0xA0, 0x142},
		{0xA1, 0xA1}, {0xAC, 0xAC},
		{0xAD, 0x143},
		{0xAE, 0xAE}, {0xFF, 0xFF},
	}
	for _, tt := range tests {
		if got := byteToSymbol[tt.b]; got != tt.want {
			t.Errorf("symbol of byte %#02x = %U, want %U", tt.b, got, tt.want)
		}
	}
	seen := map[rune]bool{}
	for b := range 256 {
		r := byteToSymbol[b]
		if seen[r] {
			t.Fatalf("symbol %U used twice", r)
		}
		seen[r] = true
		if got := symbolBytes(string(r)); len(got) != 1 || got[0] != byte(b) {
			t.Errorf("symbolBytes(%q) = %v, want [%d]", r, got, b)
		}
	}
}

func TestSymbolBytesFallsBackToUTF8(t *testing.T) {
	tests := []struct {
		token string
		want  string
	}{
		{"ĠHello", " Hello"},
		{"<|im_end|>", "<|im_end|>"},
		// A literal space is not a symbol, so the string is used as is.
		{"a b", "a b"},
		// 'é' (U+00E9) is the symbol of byte 0xE9 alone.
		{"Ã©", "é"},
		{"é", "\xe9"},
		// U+0144 is past the 68 remapped bytes: not a symbol.
		{"Ġń", "Ġń"},
	}
	for _, tt := range tests {
		if got := string(symbolBytes(tt.token)); got != tt.want {
			t.Errorf("symbolBytes(%q) = %q, want %q", tt.token, got, tt.want)
		}
	}
}

// Expected results follow Unicode §3.9 "U+FFFD substitution of maximal
// subparts" (the practice Rust's from_utf8_lossy implements); the long case
// is the standard's Table 3-8.
func TestLossyUTF8(t *testing.T) {
	const r = "\uFFFD"
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"plain", "plain"},
		{"a\x80b", "a" + r + "b"},
		{"\xe2\x82A", r + "A"},
		{"\xe2\x82", r},
		{"\xe2\x82\xac", "€"},
		{"\xc0\xaf", r + r},
		{"\xed\xa0\x80", r + r + r},
		{"\xf0\x9f\x98", r},
		{"\xf0\x9f\x98\x80", "😀"},
		{"\xf4\x90\x80\x80", r + r + r + r},
		{"\xff", r},
		{"\xe0\x80\x80", r + r + r},
		{"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a" + r + r + r + "b" + r + "c" + r + r + "d"},
	}
	for _, tt := range tests {
		if got := lossyString([]byte(tt.in)); got != tt.want {
			t.Errorf("lossyString(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// byteTokens finds, in the fixture vocabulary, the single-byte token of each
// byte of s.
func byteTokens(tok *Tokenizer, s string) []int {
	ids := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int(tok.bpe.byteIDs[s[i]])
	}
	return ids
}

func TestStreamDecoderHoldsIncompleteCharacters(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	tests := []struct {
		name  string
		bytes string
		want  []string // one per Push, then Flush
	}{
		{"4-byte emoji byte by byte", "\xf0\x9f\x99\x82", []string{"", "", "", "🙂", ""}},
		{"3-byte then ASCII", "\xe2\x82\xacA", []string{"", "", "€", "A", ""}},
		{"invalid once the next byte shows it", "\xe2A", []string{"", "\uFFFDA", ""}},
		{"lone continuation is invalid at once", "\x80", []string{"\uFFFD", ""}},
		{"cut-off sequence at flush", "a\xf0\x9f", []string{"a", "", "", "\uFFFD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tok.NewStreamDecoder(DecodeOptions{})
			var got []string
			for _, id := range byteTokens(tok, tt.bytes) {
				got = append(got, d.Push(id))
			}
			got = append(got, d.Flush())
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("outputs %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStreamDecoderAcrossSpecialTokens(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	end, _ := tok.TokenID("<|im_end|>")
	euro := byteTokens(tok, "\xe2\x82\xac")
	ids := []int{euro[0], end, euro[1], euro[2], 999999, -1}
	for _, opts := range []DecodeOptions{{}, {SkipSpecialTokens: true}} {
		want := tok.DecodeWithOptions(ids, opts)
		if got := streamAll(tok, ids, opts); got != want {
			t.Errorf("%+v: stream %q, Decode %q", opts, got, want)
		}
	}
	// Skipping <|im_end|> joins the bytes around it into one character.
	if got := tok.DecodeWithOptions(ids, DecodeOptions{SkipSpecialTokens: true}); got != "€" {
		t.Errorf("skip-special decode = %q, want €", got)
	}
	if got := tok.Decode(ids); got != "\uFFFD<|im_end|>\uFFFD\uFFFD" {
		t.Errorf("decode = %q", got)
	}
	if d := tok.NewStreamDecoder(DecodeOptions{}); d.Flush() != "" || d.Push(-5) != "" {
		t.Error("an empty stream or an unknown id produced text")
	}
	if !utf8.ValidString(tok.Decode(euro[:1])) {
		t.Error("Decode returned invalid UTF-8")
	}
}
