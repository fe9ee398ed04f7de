package verify

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probe C9: a FIFO at manifest.json or verified-install.json made
// nvmai-verify hang in open(2), deaf to Ctrl-C. A FIFO at any file an
// install names is reported at once, naming it.
func TestInstallFIFOIsRefusedAtOnce(t *testing.T) {
	for _, name := range []string{"manifest.json", "verified-install.json", "config.json", "tokenizer.json",
		"tokenizer_config.json", "generation_config.json", "resident.bin"} {
		t.Run(name, func(t *testing.T) {
			dir := installCopy(t, 4)
			p := filepath.Join(dir, name)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			type result struct {
				rep *Report
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := CheckInstall(context.Background(), dir, InstallOptions{Threads: 1})
				done <- result{rep, err}
			}()
			select {
			case r := <-done:
				named := r.err != nil && strings.Contains(r.err.Error(), name)
				if r.rep != nil {
					for _, pr := range r.rep.Problems {
						named = named || pr.File == name || strings.Contains(pr.String(), name)
					}
				}
				if !named {
					t.Fatalf("a FIFO at %s was not reported (err %v)", name, r.err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("verifying an install with a FIFO at %s blocked", name)
			}
		})
	}
}
