package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

func TestUsageErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "o")
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--inptu", "x"}, "unknown flag --inptu; did you mean --input? (see nvmai-convert --help)"},
		{[]string{"--output", out}, "--input is required"},
		{[]string{"--input", "x", "--output", out, "--threads", "-2"}, "--threads -2 is out of range: use 0 to 4096 (0 = all cores)"},
		{[]string{"--input", "x", "--output", out, "--bits", "6"}, "--bits 6 is not supported"},
		{[]string{"--input", "x", "--output", out, "extra"}, `unexpected argument "extra"`},
		{[]string{"--input", "x", "--output", out, "--threads", "abc"}, `invalid value "abc" for --threads: want a whole number`},
		{[]string{"synth", "--gemoetry", "x"}, "unknown flag --gemoetry; did you mean --geometry? (see nvmai-convert synth --help)"},
		{[]string{"synth", "--geometry", "qwen3.5-35b-a3b", "--dry-run", "--threads", "-1"}, "--threads -1 is out of range: use 0 to 4096 (0 = all cores) (see nvmai-convert synth --help)"},
		{[]string{"synth", "--geometry", "qwen3.5-35b-a3b", "--dry-run", "--seed", "-1"}, `invalid value "-1" for --seed`},
		{[]string{"synth", "--geometry", "qwen3.5-35b-a3b", "--dry-run", "--layers", "-3"}, "--layers -3 is out of range"},
		{[]string{"synth", "--geometry", "qwen3.5-35b-a3b", "--dry-run", "--bits", "5"}, "--bits 5 is not supported"},
		{[]string{"synth", "--geometry", "qwen3.5-35b-a3b", "--dry-run", "--sparse", "--bits", "16"}, "--sparse --bits 16: bfloat16 experts have no codes to leave as holes"},
		{[]string{"synth", "--geometry", "qwen3.5-9b", "--dry-run", "--sparse"}, "--sparse: qwen3.5-9b has no routed experts"},
		{[]string{"--threads", "-2", "synth", "--geometry", "x"}, "--threads -2 is out of range: use 0 to 4096 (0 = all cores) (see nvmai-convert synth --help)"}, // moved to synth
	} {
		clitest.UsageError(t, app(), tc.stderr, tc.args...)
	}
}

func TestVersion(t *testing.T) {
	if r := clitest.Run(t, app(), "--version"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "nvmai-convert devel") {
		t.Errorf("exit %d, %q", r.Code, r.Stdout)
	}
}

// M4: the summary line going nowhere is a failure, not a silent success.
func TestWriteFailure(t *testing.T) {
	full := clitest.FailingWriter{Err: &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.ENOSPC}}
	r := clitest.RunWith(t, app(), clitest.Options{Stdout: full}, "synth", "--geometry", "qwen3.5-35b-a3b", "--dry-run")
	if r.Code != cliutil.ExitFailure || !strings.Contains(r.Stderr, "write stdout: no space left on device") {
		t.Errorf("dry run to a full stdout: exit %d, %q", r.Code, r.Stderr)
	}
	out := filepath.Join(t.TempDir(), "m")
	r = clitest.RunWith(t, app(), clitest.Options{Stdout: full}, "--input", testfix.Embedded(t), "--output", out, "--quiet")
	if r.Code != cliutil.ExitFailure || !strings.Contains(r.Stderr, "write stdout: no space left on device") {
		t.Errorf("convert to a full stdout: exit %d, %q", r.Code, r.Stderr)
	}
}

// L6: sizes in binary units with their precision.
func TestDryRunUnits(t *testing.T) {
	r := clitest.Run(t, app(), "synth", "--geometry", "qwen3.5-35b-a3b", "--layers", "1", "--dry-run")
	if r.Code != 0 || !strings.Contains(r.Stdout, " GiB in ") || strings.Contains(r.Stdout, " GB") {
		t.Errorf("exit %d, %q", r.Code, r.Stdout)
	}
}

// --sparse --dry-run states the logical size and the size on disk, and
// whether the output's file system keeps holes.
func TestSparseDryRunStatesDiskBytes(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m")
	r := clitest.Run(t, app(), "synth", "--geometry", "qwen3.8-flash-next-125b-a6b", "--bits", "4", "--sparse", "--dry-run", "--output", out)
	for _, want := range []string{"168.3 GiB in 55 files", "(their codes written as holes)", "; on disk 10.3 GiB", "keeps holes"} {
		if r.Code != 0 || !strings.Contains(r.Stdout, want) {
			t.Errorf("exit %d, %q lacks %q", r.Code, r.Stdout, want)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 0 {
		t.Errorf("a dry run left %v", entries)
	}
}
