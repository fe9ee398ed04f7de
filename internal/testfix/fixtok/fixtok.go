// Package fixtok loads the embedded fixture's tokenizer (testdata/
// tiny-moe-fused) once per test binary, for the tests that constrain
// generation over its vocabulary (jsonconstrain, toolconstrain).
package fixtok

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

var (
	once sync.Once
	tok  *tokenizer.Tokenizer
	err  error
)

// Tokenizer is the fixture's tokenizer, loaded on first use.
func Tokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	once.Do(func() {
		dir := testfix.Embedded(t)
		tok, err = tokenizer.Load(filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json"))
	})
	if err != nil {
		t.Fatalf("fixture tokenizer: %v", err)
	}
	return tok
}

// Ends are the ids of the fixture's end tokens, <|im_end|> and
// <|endoftext|>.
func Ends(t testing.TB, tok *tokenizer.Tokenizer) []int {
	t.Helper()
	var ends []int
	for _, name := range []string{"<|im_end|>", "<|endoftext|>"} {
		id, ok := tok.TokenID(name)
		if !ok {
			t.Fatalf("fixture has no %s", name)
		}
		ends = append(ends, id)
	}
	return ends
}
