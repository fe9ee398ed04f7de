package main

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

func randomBytes(n int) string {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}

// R5: a prompt far over the context is refused without tokenizing it whole
// (tokenizer.EncodeLimit's own tests bound that work), a cancelled context
// stops it before any work, and a prompt that fits passes.
func TestPromptWithinContextRefusesFarOverTheLimit(t *testing.T) {
	tok := loadEmbeddedTokenizer(t)
	big := randomBytes(8 << 20)
	err := promptWithinContext(context.Background(), tok, big, 1000)
	if err == nil || !strings.Contains(err.Error(), "more than the context limit of 1000 tokens") {
		t.Fatalf("8 MiB of binary against a context of 1000: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var ie *cliutil.InterruptedError
	if err := promptWithinContext(ctx, tok, big, 1000); !errors.As(err, &ie) {
		t.Errorf("cancelled: %v; want an interruption", err)
	}

	text := strings.Repeat("The capital of France is Paris.\n", 10000) // 320 KB
	n := len(tok.Encode(text))
	for _, limit := range []int{n, 0} {
		if err := promptWithinContext(context.Background(), tok, text, limit); err != nil {
			t.Errorf("a %d-token text against a limit of %d: %v", n, limit, err)
		}
	}
	if err := promptWithinContext(context.Background(), tok, text, n/4); err == nil {
		t.Errorf("a %d-token text against a limit of %d was not refused early", n, n/4)
	}
}

// R5 end to end: a 16 MiB --prompt-file of binary is refused against the
// context at once, and an ordinary prompt file gives the tokens it always did.
func TestPromptFileFarOverTheContext(t *testing.T) {
	m := model(t)
	big := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(big, []byte(randomBytes(16<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := clitest.Run(t, app(), "--model", m, "--prompt-file", big, "--max-context", "512", "-n", "1")
	if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, "more than the context limit of 512 tokens") {
		t.Errorf("exit %d, %q", r.Code, r.Stderr)
	}

	p := filepath.Join(t.TempDir(), "p.txt")
	text := strings.Repeat("Once upon a time there was a small model.\n", 5000)
	os.WriteFile(p, []byte(text), 0o644)
	r = clitest.Run(t, app(), "--model", m, "--prompt-file", p, "--max-context", "512", "-n", "1", "--json")
	if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, "more than the context limit") {
		t.Errorf("a long text file: exit %d, %q", r.Code, r.Stderr)
	}
	short := "Once upon a time there was a small model.\n\n  It ran   on  a laptop.\n"
	os.WriteFile(p, []byte(short), 0o644)
	r = clitest.Run(t, app(), "--model", m, "--prompt-file", p, "-n", "1", "--json", "--temperature", "0")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	tok := loadEmbeddedTokenizer(t)
	want := tok.Encode(strings.TrimSuffix(short, "\n"))
	var res struct {
		PromptIDs []int `json:"prompt_ids"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || !slices.Equal(res.PromptIDs, want) {
		t.Errorf("prompt ids %v (%v), want %v", res.PromptIDs, err, want)
	}
}
