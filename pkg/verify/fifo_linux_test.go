package verify

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/testfix"
)

// probe C9: a FIFO at manifest.json or verified-install.json made
// nvmai-verify hang in open(2), deaf to Ctrl-C. A FIFO at any file an
// install names is reported at once, naming it.
func TestInstallFIFOIsRefusedAtOnce(t *testing.T) {
	for _, name := range []string{"manifest.json", "verified-install.json", "config.json", "tokenizer.json",
		"tokenizer_config.json", "generation_config.json", "resident.bin"} {
		t.Run(name, func(t *testing.T) {
			dir := installCopy(t, 4)
			testfix.MakeFIFO(t, filepath.Join(dir, name))
			type result struct {
				rep *Report
				err error
			}
			r := testfix.Within(t, 20*time.Second, "verifying an install with a FIFO at "+name, func() result {
				rep, err := CheckInstall(context.Background(), dir, InstallOptions{Threads: 1})
				return result{rep, err}
			})
			named := r.err != nil && strings.Contains(r.err.Error(), name)
			if r.rep != nil {
				for _, pr := range r.rep.Problems {
					named = named || pr.File == name || strings.Contains(pr.String(), name)
				}
			}
			if !named {
				t.Fatalf("a FIFO at %s was not reported (err %v)", name, r.err)
			}
		})
	}
}
