package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--bogus"}, "unknown flag --bogus (see nvmai-install --help)"},
		{[]string{"--model-dir", "x"}, "unknown flag --model-dir; did you mean --models-dir?"},
		{[]string{"qwen36", "6bit"}, "--bits 6 is not supported: 6-bit was withdrawn"},
		{[]string{"--repo", "a/b", "--bits", "4,6"}, "--bits 6 is not supported: 6-bit was withdrawn"},
		{[]string{"qwen36", "4bit,9"}, "--bits 9 is not supported"},
		{[]string{"--repo", "a/b", "--bits", "x"}, `widths "x": want 4, 8 or 16`},
		{[]string{"qwen36", "huge"}, `widths "huge": want 4, 8 or 16`},
		{[]string{"katcoder-8bit", "4bit"}, `"katcoder-8bit" asks for 8-bit but "4bit" for 4-bit`},
		{[]string{"qwen36", "4bit", "--bits", "4"}, "--bits is for --repo"},
		{[]string{"qwen36", "4bit", "extra"}, "want NAME [WIDTHS], got 3 arguments"},
		// M9: flags after the name are flags; L1: ranges.
		{[]string{"qwen36", "4bit", "--models-dir", "/nonexistent", "--parallel", "-5"}, "--parallel -5 is out of range: use 1 to 64"},
		{[]string{"qwen36", "--parallel", "0"}, "--parallel 0 is out of range"},
		{[]string{"qwen36", "--parallel", "100000"}, "--parallel 100000 is out of range"},
		{[]string{"qwen36", "--threads", "-1"}, "--threads -1 is out of range"},
	} {
		clitest.UsageError(t, app(), tc.stderr, tc.args...)
	}
}

func TestVersion(t *testing.T) {
	if r := clitest.Run(t, app(), "--version"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "nvmai-install devel") {
		t.Errorf("exit %d, %q", r.Code, r.Stdout)
	}
}

// L27: both forms take the same widths, 16 included; flags may follow NAME.
func TestTargetWidths(t *testing.T) {
	for _, tc := range []struct {
		args []string
		name string
		want []int
	}{
		{[]string{"qwen36"}, "qwen36", []int{4}},
		{[]string{"qwen36", "8bit"}, "qwen36", []int{8}},
		{[]string{"qwen36", "16bit"}, "qwen36", []int{16}},
		{[]string{"qwen36", "16-bit"}, "qwen36", []int{16}},
		{[]string{"qwen36", "both"}, "qwen36", []int{4, 8}},
		{[]string{"qwen36", "4bit,16bit"}, "qwen36", []int{4, 16}},
		{[]string{"qwen36", "4,8,16"}, "qwen36", []int{4, 8, 16}},
		{[]string{"qwen36-16bit"}, "qwen36", []int{16}},
		{[]string{"katcoder-8bit"}, "katcoder", []int{8}},
		{[]string{"katcoder-8bit", "8bit"}, "katcoder", []int{8}},
		{[]string{"qwen36", "4bit", "--models-dir", "/tmp/x"}, "qwen36", []int{4}},
		{[]string{"--repo", "org/model", "--bits", "4,16"}, "model", []int{4, 16}},
		{[]string{"--repo", "org/model", "--bits", "16bit"}, "model", []int{16}},
	} {
		a := app()
		var name string
		var widths []int
		a.Action = func(c *cli.Context) error {
			e, w, err := target(c)
			name, widths = e.Name, w
			return err
		}
		if r := clitest.Run(t, a, tc.args...); r.Code != 0 || name != tc.name || !slices.Equal(widths, tc.want) {
			t.Errorf("%q: exit %d (%s), %s %v; want %s %v", tc.args, r.Code, r.Stderr, name, widths, tc.name, tc.want)
		}
	}
}
