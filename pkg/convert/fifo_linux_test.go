package convert

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/testfix"
)

// probe C9: a FIFO put where a snapshot file belongs is refused at once,
// naming it, instead of blocking the converter in open(2) past Ctrl-C.
func TestSnapshotFIFOIsRefusedAtOnce(t *testing.T) {
	for _, name := range []string{"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
		"model.safetensors.index.json", "model-00001-of-00004.safetensors"} {
		t.Run(name, func(t *testing.T) {
			src := embeddedSnapshot(t)
			testfix.MakeFIFO(t, filepath.Join(src, name))
			parent := t.TempDir()
			err := testfix.Within(t, 20*time.Second, "converting with a FIFO at "+name, func() error {
				_, err := Run(context.Background(), Options{Input: src, Targets: []Target{{4, filepath.Join(parent, "out")}}, Threads: 2})
				return err
			})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("converting with a FIFO at %s: %v; want a refusal naming it", name, err)
			}
			assertNoLeftovers(t, parent)
		})
	}
}
