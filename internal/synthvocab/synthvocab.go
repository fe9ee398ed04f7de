// Package synthvocab builds the synthetic vocabulary the size of Qwen3.5's
// (248,320 ids) that the constrained decoders' benchmarks (jsonconstrain,
// toolconstrain) mask over, so both measure the same shape of vocabulary.
package synthvocab

import "math/rand/v2"

// Size is Qwen3.5's vocabulary size.
const Size = 248_320

// Tokens248k is Size token byte strings, always the same: every single
// byte, then pieces, then words, JSON punctuation runs, digit runs and CJK
// runs, so that shared prefixes and the share of tokens a string accepts
// resemble a real byte-level BPE vocabulary. markupShare percent of the
// random tokens are markup-like (a newline, tab, space, < > or / and
// letters), taken from the words, punctuation and digits; the last two are
// "<|im_end|>" and "<|endoftext|>", for the caller to mark special.
func Tokens248k(pieces []string, markupShare int) [][]byte {
	rng := rand.New(rand.NewPCG(248, 320))
	toks := make([][]byte, 0, Size)
	for b := 0; b < 256; b++ {
		toks = append(toks, []byte{byte(b)})
	}
	for _, s := range pieces {
		toks = append(toks, []byte(s))
	}
	letters := "etaoinshrdlucmfwypvbgkjqxz"
	for len(toks) < Size-2 {
		var t []byte
		switch r := rng.IntN(100); {
		case r < 70-markupShare:
			if rng.IntN(2) == 0 {
				t = append(t, ' ')
			}
			for n := 1 + rng.IntN(9); n > 0; n-- {
				t = append(t, letters[min(rng.IntN(26), rng.IntN(26))])
			}
		case r < 80-markupShare:
			for n := 1 + rng.IntN(4); n > 0; n-- {
				t = append(t, `{}[]":, `[rng.IntN(8)])
			}
		case r < 88-markupShare:
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
		toks = append(toks, t)
	}
	return append(toks, []byte("<|im_end|>"), []byte("<|endoftext|>"))
}
