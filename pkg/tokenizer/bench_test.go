package tokenizer

import (
	"strings"
	"sync"
	"testing"
)

// longPrompt is about 100k tokens of English prose and code: the long
// reference prompt of tiny-moe repeated.
func longPrompt(tb testing.TB) string {
	var refs refsFile
	readFixtureJSON(tb, "tiny-moe.refs.json", &refs)
	longest := ""
	for _, p := range refs.Prompts {
		if len(p.Text) > len(longest) {
			longest = p.Text
		}
	}
	return strings.Repeat(longest+"\n\n", 100)
}

func BenchmarkEncode(b *testing.B) {
	tok := fixtureTokenizer(b, "tiny-moe-fused")
	prose := longPrompt(b)
	b.Run("prose", func(b *testing.B) {
		b.SetBytes(int64(len(prose)))
		n := 0
		for b.Loop() {
			n = len(tok.Encode(prose))
		}
		b.ReportMetric(float64(n), "tokens/op")
	})
	b.Run("prose-cold-cache", func(b *testing.B) {
		b.SetBytes(int64(len(prose)))
		for b.Loop() {
			tok.cache.mu.Lock()
			tok.cache.entries = nil
			tok.cache.mu.Unlock()
			tok.Encode(prose)
		}
	})
	cjk := strings.Repeat("你好世界汉字", 20000) // one 360 KB piece
	b.Run("one-long-piece", func(b *testing.B) {
		b.SetBytes(int64(len(cjk)))
		for b.Loop() {
			tok.Encode(cjk)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	tok := fixtureTokenizer(b, "tiny-moe-fused")
	ids := tok.Encode(longPrompt(b))
	b.ReportAllocs()
	for b.Loop() {
		tok.Decode(ids)
	}
}

// TestConcurrentEncode shares one Tokenizer (and its piece cache) between
// goroutines; run with -race.
func TestConcurrentEncode(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	cases := tokenizerCases(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				c := cases[(g+i)%len(cases)]
				if got := tok.Encode(c.Text); len(got) != len(c.IDs) {
					t.Errorf("concurrent Encode(%q): %d ids, want %d", c.Text, len(got), len(c.IDs))
					return
				}
			}
		})
	}
	wg.Wait()
}
