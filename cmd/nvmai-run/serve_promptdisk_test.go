package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// serve --model with --prompt-cache-dir hashes the install first and
// refuses a damaged one (#44 D12: its receipt is unchanged, so it would
// resume the intact install's snapshots), saying what to run; a directory
// on procfs is refused (#44 D14). Both before the server is ready.
func TestServePromptDiskRefuses(t *testing.T) {
	damaged := filepath.Join(t.TempDir(), "damaged")
	testfix.CopyTree(t, tinyInstall(t), damaged)
	resident := filepath.Join(damaged, packexperts.ResidentFile)
	testfix.FlipByte(t, resident, testfix.Middle, 0x5a)
	cache := filepath.Join(t.TempDir(), "prompts")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "--model", damaged, "--prompt-cache-dir", cache, "--port", "0"},
			[]string{"does not match its receipt", packexperts.ResidentFile, "nvmai-verify --verify-install " + damaged}},
		{[]string{"serve", "--model", damaged, "--prompt-cache-dir", "/proc/self", "--port", "0"},
			[]string{"/proc/self is on procfs, a virtual filesystem"}},
	} {
		r := clitest.Run(t, app(), tc.args...)
		if r.Code == 0 || strings.Contains(r.Stderr, "ready at") {
			t.Errorf("%q: exit %d, stderr %q; want a refusal", tc.args, r.Code, r.Stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.Stderr, w) {
				t.Errorf("%q: stderr %q lacks %q", tc.args, r.Stderr, w)
			}
		}
	}
}
