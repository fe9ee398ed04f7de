package tokenizer

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/testfix"
)

// limitAlphabet mixes what changes pieces and normalisation: letters,
// combining marks (NFC composes e+U+0301), Hangul jamo, digits, CJK,
// apostrophes and contraction letters, every kind of white space and
// CR/LF, punctuation, emoji and the fixture's added tokens.
var limitAlphabet = []string{
	"a", "b", "Z", "s", "t", "re", "ll", "d", "é", "e\u0301", "\u0301", "\u0323", "\u1100", "\u1161", "\u11a8",
	"0", "7", "٣", "中", "文", "'", "'S", "ſ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000",
	"!", "?.", "—", "😀", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "\uFFFD",
}

func randomLimitText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(limitAlphabet[r.IntN(len(limitAlphabet))])
	}
	return b.String()
}

// EncodeLimit with room for every token is Encode, whatever the chunk size
// (tiny chunks put a chunk edge at every kind of place); with one token
// less it reports truncated. 1000 random texts a chunk size, 200 under the
// race detector (or -short); scripts/test.sh runs all without it.
func TestEncodeLimitIsEncodeUnderTheLimit(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	defer func(n int) { encodeChunkBytes = n }(encodeChunkBytes)
	r := rand.New(rand.NewPCG(44, 23))
	texts := 1000
	if testfix.Quick(raceEnabled) {
		texts = 200
	}
	for _, chunk := range []int{1, 2, 3, 5, 8, 64, 64 << 10} {
		encodeChunkBytes = chunk
		for range texts {
			text := randomLimitText(r, r.IntN(120))
			want := tok.Encode(text)
			got, truncated := tok.EncodeLimit(text, len(want))
			if truncated || !slices.Equal(got, want) {
				t.Fatalf("chunk %d: EncodeLimit(%q, %d) = %v, %v; Encode = %v", chunk, text, len(want), got, truncated, want)
			}
			if got, _ := tok.EncodeLimit(text, len(want)+1000); !slices.Equal(got, want) {
				t.Fatalf("chunk %d: EncodeLimit(%q) with room = %v; Encode = %v", chunk, text, got, want)
			}
			if len(want) > 0 {
				if _, truncated := tok.EncodeLimit(text, len(want)-1); !truncated {
					t.Fatalf("chunk %d: EncodeLimit(%q, %d) not truncated with %d tokens", chunk, text, len(want)-1, len(want))
				}
			}
		}
	}
}

// A huge text is not encoded past the limit: a few megabytes of one word,
// of white space and of mixed text each end well within the time and the
// ids of a few thousand tokens.
func TestEncodeLimitStopsEarlyOnHugeText(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	r := rand.New(rand.NewPCG(1, 2))
	texts := map[string]string{
		"one word":    strings.Repeat("中", 512<<10),
		"white space": strings.Repeat(" ", 1<<20) + "x",
		"mixed":       randomLimitText(r, 256<<10),
	}
	const limit = 4096
	for name, text := range texts {
		// The best of three: test.sh runs this beside the emulated GPU
		// tests on two cores, and one slow run is the machine, not the code.
		var ids []int
		var truncated bool
		took := time.Duration(math.MaxInt64)
		for range 3 {
			start := time.Now()
			ids, truncated = tok.EncodeLimit(text, limit)
			took = min(took, time.Since(start))
		}
		if !truncated || len(ids) > limit+1 || cap(ids) > limit+1 {
			t.Errorf("%s: %d ids (cap %d), truncated %v; want at most %d and truncated", name, len(ids), cap(ids), truncated, limit+1)
		}
		full := time.Now()
		tok.Encode(text)
		if whole := time.Since(full); took > whole/4 {
			t.Errorf("%s: EncodeLimit took %v, the whole Encode %v: it did not stop early", name, took, whole)
		}
	}
}
