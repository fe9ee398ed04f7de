package main

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

// The HTTP layer's limits refuse values that would disable them, before
// any port is opened.
func TestServeHTTPFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"serve", "--model", dir, "--stream-write-timeout", "0s"}, "--stream-write-timeout 0s: give a positive duration"},
		{[]string{"serve", "--model", dir, "--max-connections", "0"}, "--max-connections must be ≥ 1"},
	} {
		r := clitest.Run(t, app(), tc.args...)
		if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, tc.stderr) || r.Stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 with %q", tc.args, r.Code, r.Stdout, r.Stderr, tc.stderr)
		}
	}
}
