package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// copyInstall copies an install so a test can damage it.
func copyInstall(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "m")
	testfix.CopyTree(t, src, dst)
	return dst
}

// Loading refuses damaged installs with a message that names the problem
// and what to run next.
func TestLoadRefusesDamagedInstalls(t *testing.T) {
	good := install(t, "tiny-moe-fused", 4)
	for _, tc := range []struct {
		name   string
		damage func(dir string)
		want   []string
	}{
		{"not an install", func(dir string) { os.Remove(filepath.Join(dir, packexperts.ManifestFile)) }, []string{"not an nvmai install", "nvmai-convert"}},
		{"missing expert file", func(dir string) { os.Remove(filepath.Join(dir, packexperts.ExpertFileName(3))) }, []string{"layer-003.bin", "nvmai-verify"}},
		{"truncated resident file", func(dir string) { os.Truncate(filepath.Join(dir, packexperts.ResidentFile), 100) }, []string{"resident.bin", "nvmai-verify"}},
		{"missing receipt", func(dir string) { os.Remove(filepath.Join(dir, packexperts.ReceiptFile)) }, []string{"receipt", "nvmai-verify --verify-install"}},
		{"unknown format version", func(dir string) {
			p := filepath.Join(dir, packexperts.ManifestFile)
			raw, _ := os.ReadFile(p)
			os.WriteFile(p, []byte(strings.Replace(string(raw), `"format_version": 1`, `"format_version": 7`, 1)), 0o644)
		}, []string{"format_version 7", "convert the model again"}},
		{"missing tokenizer", func(dir string) { os.Remove(filepath.Join(dir, "tokenizer.json")) }, []string{"tokenizer.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyInstall(t, good)
			tc.damage(dir)
			e, err := Load(dir, Options{Threads: 1})
			if err == nil {
				e.Close()
				t.Fatal("damaged install loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
