package toolconstrain

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
)

// synthetic248k is a vocabulary the size of Qwen3.5's (248,320 ids), built
// as pkg/jsonconstrain's benchmark builds it (every byte, words, JSON
// punctuation, digit and CJK runs), plus the markup pieces a byte-level
// BPE vocabulary has (<tool_call>, </, parameter, >\n, newline runs…).
var synthetic248k = sync.OnceValue(func() *byteVocab {
	const size = 248_320
	rng := rand.New(rand.NewPCG(248, 320))
	v := &byteVocab{special: map[int]bool{}}
	for b := 0; b < 256; b++ {
		v.toks = append(v.toks, []byte{byte(b)})
	}
	for _, s := range []string{"<tool_call>", "</tool_call>", "<", "</", "<function", "<parameter", "parameter", "function",
		"=", ">", ">\n", "\n", "\n\n", "\n</", "\n<", "_call", "tool", "get", "_weather", "city", "days", "unit"} {
		v.toks = append(v.toks, []byte(s))
	}
	letters := "etaoinshrdlucmfwypvbgkjqxz"
	for len(v.toks) < size-2 {
		var t []byte
		switch r := rng.IntN(100); {
		case r < 68:
			if rng.IntN(2) == 0 {
				t = append(t, ' ')
			}
			for n := 1 + rng.IntN(9); n > 0; n-- {
				t = append(t, letters[min(rng.IntN(26), rng.IntN(26))])
			}
		case r < 78:
			for n := 1 + rng.IntN(4); n > 0; n-- {
				t = append(t, `{}[]":, `[rng.IntN(8)])
			}
		case r < 86:
			for n := 1 + rng.IntN(3); n > 0; n-- {
				t = append(t, byte('0'+rng.IntN(10)))
			}
		case r < 88:
			t = append(t, "\n\t <>/"[rng.IntN(6)])
			for n := 1 + rng.IntN(4); n > 0; n-- {
				t = append(t, letters[rng.IntN(26)])
			}
		default:
			for n := 1 + rng.IntN(3); n > 0; n-- {
				t = append(t, string(rune(0x4E00+rng.IntN(0x5000)))...)
			}
		}
		v.toks = append(v.toks, t)
	}
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		v.special[len(v.toks)] = true
		v.toks = append(v.toks, []byte(s))
	}
	return v
})

// benchStates are positions in a call, from free text (a few tokens to
// check) through markup (a short trie walk) to values (a raw string, a
// bounded one, JSON).
var benchStates = []struct {
	name   string
	plan   Plan
	prefix string
}{
	{"text", Plan{Choice: Auto}, "Let me check the weather. "},
	{"function-name", Plan{Choice: Auto}, "<tool_call>\n<function=get_"},
	{"parameter-name", Plan{Choice: Named, Name: "get_weather"}, "<parameter="},
	{"raw-string", Plan{Choice: Named, Name: "get_weather"}, "<parameter=city>\nSan Fra"},
	{"raw-string-after-newline", Plan{Choice: Named, Name: "get_weather"}, "<parameter=city>\nSan\n"},
	{"bounded-string", Plan{Choice: Named, Name: "write_file"}, "<parameter=path>\n/tmp/"},
	{"json-integer", Plan{Choice: Named, Name: "get_weather"}, "<parameter=days>\n1"},
	{"json-object-string", Plan{Choice: Named, Name: "write_file"}, "<parameter=options>\n{\"tags\": [\"ab"},
	{"json-closed", Plan{Choice: Named, Name: "write_file"}, "<parameter=options>\n{\"mode\": 1}"},
}

// go test -run '^$' -bench Mask248k ./pkg/toolconstrain/
func BenchmarkMask248k(b *testing.B) {
	v := synthetic248k()
	ends := []int{len(v.toks) - 2, len(v.toks) - 1}
	jm, err := jsonconstrain.NewMasker(v, ends)
	if err != nil {
		b.Fatal(err)
	}
	tv, err := NewVocab(v, ends, jm)
	if err != nil {
		b.Fatal(err)
	}
	g := testGrammar(b)
	row := make([]float32, len(v.toks))
	for _, s := range benchStates {
		b.Run(s.name, func(b *testing.B) {
			s.plan.Grammar = g
			c, err := tv.Constrain(s.plan)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < len(s.prefix); i++ {
				if _, err := c.Advance(int(s.prefix[i])); err != nil {
					b.Fatalf("prefix %q: %v", s.prefix[:i+1], err)
				}
			}
			clear(row)
			allowed := c.Mask(row)
			b.ResetTimer()
			for range b.N {
				c.Mask(row)
			}
			b.ReportMetric(float64(allowed), "allowed")
		})
	}
}

// The one-time cost per model: the tables NewVocab builds.
func BenchmarkNewVocab248k(b *testing.B) {
	v := synthetic248k()
	ends := []int{len(v.toks) - 2, len(v.toks) - 1}
	jm, err := jsonconstrain.NewMasker(v, ends)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := NewVocab(v, ends, jm); err != nil {
			b.Fatal(err)
		}
	}
}
