package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

func pieces(s string) []string {
	var out []string
	splitPieces(s, func(p string) { out = append(out, p) })
	return out
}

// The expected pieces are worked out by hand from the regex of
// qwen35-architecture.md §5 (alternatives in order, first match wins).
func TestSplitPieces(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"two spaces then a word", "  hello", []string{" ", " hello"}},
		{"lone space before a letter", " a", []string{" a"}},
		{"CRLF run", "a\r\n\r\nb", []string{"a", "\r\n\r\n", "b"}},
		{"spaces at the end", "x   ", []string{"x", "   "}},
		{"spaces between words", "x   y", []string{"x", "  ", " y"}},
		{"space newline space", "x \n y", []string{"x", " \n", " y"}},
		{"spaces before a final newline", "a  \n", []string{"a", "  \n"}},
		{"contraction", "it's", []string{"it", "'s"}},
		{"contraction upper case", "IT'S", []string{"IT", "'S"}},
		{"contractions", "we'LL they've I'm you'Re he'd don't", []string{
			"we", "'LL", " they", "'ve", " I", "'m", " you", "'Re", " he", "'d", " don", "'t",
		}},
		{"contraction before letters", "'stop", []string{"'s", "top"}},
		{"apostrophe before other letter", "'x", []string{"'x"}},
		{"lone apostrophe", "'", []string{"'"}},
		// (?i) folds the Unicode way: U+017F LATIN SMALL LETTER LONG S is 's'.
		{"contraction long s", "x'ſ", []string{"x", "'ſ"}},
		{"digits one by one", "12345", []string{"1", "2", "3", "4", "5"}},
		{"digits inside a word", "abc123def", []string{"abc", "1", "2", "3", "def"}},
		{"space before digit", "a 1", []string{"a", " ", "1"}},
		{"currency then digits", "$100", []string{"$", "1", "0", "0"}},
		{"vulgar fraction is a number", "½x", []string{"½", "x"}},
		{"CJK with fullwidth comma", "你好，世界", []string{"你好", "，世界"}},
		{"emoji run after a space", "emoji 🙂👍🏽 ok", []string{"emoji", " 🙂👍🏽", " ok"}},
		{"combining mark in a word", "cafe\u0301 x", []string{"cafe\u0301", " x"}},
		{"leading combining mark", "\u0301a", []string{"\u0301a"}},
		{"space before a mark", " \u0301", []string{" \u0301"}},
		{"digit then mark", "1\u0301", []string{"1", "\u0301"}},
		{"NBSP before a letter", "a\u00a0b", []string{"a", "\u00a0b"}},
		{"ideographic spaces", "a\u3000\u3000b", []string{"a", "\u3000", "\u3000b"}},
		{"NBSP before punctuation", "a\u00a0!", []string{"a", "\u00a0", "!"}},
		{"tab before a word", "\tfoo", []string{"\tfoo"}},
		{"punctuation run then newlines", "end...\n\nnext", []string{"end", "...\n\n", "next"}},
		{"space punctuation CRLF", " !!\r\n x", []string{" !!\r\n", " x"}},
		{"punctuation before a word", "(x)", []string{"(x", ")"}},
		{"control before a letter", "\x00a", []string{"\x00a"}},
		{"newline before a letter", "\na", []string{"\n", "a"}},
		{"hello world", "Hello, world!", []string{"Hello", ",", " world", "!"}},
		{"code", "def f(x):\n    return x**2  # square\n", []string{
			"def", " f", "(x", "):\n", "   ", " return", " x", "**", "2", " ", " #", " square", "\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pieces(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("pieces(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestSplitPiecesTiles(t *testing.T) {
	for _, s := range []string{"  hello  ", "a\u3000 \u00a0\r\n\tb", "x'ſ'S'", "🙂\u0301\u0301 1"} {
		if got := strings.Join(pieces(s), ""); got != s {
			t.Errorf("pieces of %q join to %q", s, got)
		}
	}
}
