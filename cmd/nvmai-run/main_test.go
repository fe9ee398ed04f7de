package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

// model converts the embedded model at 4 bits once per test binary.
func model(t *testing.T) string {
	t.Helper()
	return fixinstall.Install(t, testfix.Embedded(t), 4)
}

func TestMain(m *testing.M) { fixinstall.Main(m) }

// The transformers reference continuation of "Once upon a" (greedy), from
// ../shared/fixtures/README.md (tiny-moe.refs.json).
const onceUponA = " time, there was a little robot who loved to read books."

// Every command-line mistake: exit 2, one line on stderr naming the fix,
// nothing on stdout, in the app and each subcommand.
func TestUsageErrors(t *testing.T) {
	m := model(t)
	empty := filepath.Join(t.TempDir(), "empty.txt")
	os.WriteFile(empty, []byte("\n"), 0o644)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--model", m, "--promt", "hi"}, "unknown flag --promt; did you mean --prompt? (see nvmai-run --help)"},
		{[]string{"--model", m, "--bogus"}, "unknown flag --bogus (see nvmai-run --help)"},
		{[]string{"--model", m, "--prompt", "hi", "--seed", "-1"}, `invalid value "-1" for --seed: want a whole number, 0 or more`},
		{[]string{"--model", m, "--prompt", "hi", "--temperature", "abc"}, `invalid value "abc" for --temperature: want a number`},
		{[]string{"--model", m, "--prompt", "hi", "--max-tokens", "9999999999999999999999"}, "for --max-tokens: too large"},
		{[]string{"chat", "--model", m, "--promt", "hi"}, "unknown flag --promt (see nvmai-run chat --help)"},
		{[]string{"bench", "--model", m, "--tokns", "3"}, "unknown flag --tokns; did you mean --tokens? (see nvmai-run bench --help)"},
		{[]string{"hello", "--model", m}, `unexpected argument "hello" (did you mean --prompt?)`},
		{[]string{"--prompt", "hi"}, "--model DIR is required"},
		// L1: negative or absurd numbers, with the range.
		{[]string{"--model", m, "--prompt", "hi", "--threads", "-4"}, "--threads -4 is out of range: use 0 to 4096 (0 = all cores)"},
		{[]string{"--model", m, "--prompt", "hi", "--max-context", "-1"}, "--max-context -1 is out of range: use 1 to"},
		{[]string{"--model", m, "--prompt", "hi", "--kv-initial", "0"}, "--kv-initial 0 is out of range: use 1 to"},
		{[]string{"--model", m, "--prompt", "hi", "--kv-initial", "2000000000"}, "--kv-initial 2000000000 is out of range"},
		{[]string{"--model", m, "--prompt", "hi", "--max-tokens", "0"}, "--max-tokens 0 is out of range: use 1 to"},
		{[]string{"--model", m, "--prompt", "hi", "--prefetch", "-1"}, "--prefetch -1 is out of range: use 0 to 64 (0 = off)"},
		{[]string{"--model", m, "--prompt", "hi", "--ram-budget", "0"}, "--ram-budget 0 holds no experts"},
		{[]string{"bench", "--model", m, "--tokens", "1"}, "--tokens 1 is out of range: use 2 to"},
		// L2: mistakes that need the model, still exit 2.
		{[]string{"--model", m, "--prompt", "hi", "--io-threads", "-1"}, "--io-threads -1 is out of range: use 1 to 64"},
		{[]string{"--model", m, "--prompt", "hi", "--expert-cache-slots", "1"}, "--expert-cache-slots 1 cannot hold the 4 experts one token routes to; use 4 to 16"},
		{[]string{"--model", m, "--prompt", "hi", "--ram-budget", "1K"}, "--ram-budget 1K is below this model's minimum of 512 KiB"},
		{[]string{"--model", m, "--prompt", ""}, "empty prompt: give --prompt TEXT"},
		{[]string{"--model", m, "--prompt-file", empty}, "empty prompt: --prompt-file " + empty + " holds no text"},
		{[]string{"--model", m, "--prompt", "Once upon a", "--max-context", "3"}, "the prompt has 5 tokens, more than the context limit of 3 tokens; shorten the prompt or raise --max-context"},
		{[]string{"--model", m}, "no prompt: give --prompt TEXT, --prompt-file FILE or --prompt-ids IDS"},
		// L4: conflicting flags.
		{[]string{"--model", m, "--system", "x", "--prompt", "hi"}, "--system applies to --chat"},
		{[]string{"--model", m, "--reasoning-effort", "low", "--prompt", "hi"}, "--reasoning-effort applies to --chat"},
		{[]string{"--model", m, "--chat", "--prompt", "hi", "--reasoning-effort", "low"}, "--reasoning-effort: this install's chat template has no reasoning effort"},
		{[]string{"chat", "--model", m, "--reasoning-effort", "low"}, "--reasoning-effort: this install's chat template has no reasoning effort"},
		{[]string{"--model", m, "--chat", "--prompt-ids", "1,2"}, "--prompt-ids bypasses the tokenizer, so --chat cannot wrap it"},
		{[]string{"--model", m, "--prompt", "hi", "--prompt-file", empty}, "give --prompt or --prompt-file, not both"},
		{[]string{"--model", m, "--prompt", "hi", "--expert-cache-slots", "8", "--ram-budget", "1K"}, "give --expert-cache-slots or --ram-budget, not both"},
		{[]string{"bench", "--model", m, "--json", "--kv"}, "give --json or --kv, not both (see nvmai-run bench --help)"},
		{[]string{"--prompt", "hi", "bench", "--model", m}, "--prompt does not apply to nvmai-run bench"},
	} {
		clitest.UsageError(t, app(), tc.stderr, tc.args...)
	}
}

func TestPoolSpinEnv(t *testing.T) {
	t.Setenv("NVMAI_POOL_SPIN_US", "-5")
	r := clitest.Run(t, app(), "--model", model(t), "--prompt", "hi")
	if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, "NVMAI_POOL_SPIN_US=-5: use a whole number from 0 to 1000000") {
		t.Errorf("exit %d, stderr %q", r.Code, r.Stderr)
	}
}

func TestVersion(t *testing.T) {
	r := clitest.Run(t, app(), "--version")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "nvmai-run devel") {
		t.Errorf("exit %d, stdout %q", r.Code, r.Stdout)
	}
}

// M9: flags after positionals and app flags before a subcommand reach it.
func TestFlagOrder(t *testing.T) {
	m := model(t)
	// chat reads the model's manifest only if --model reached it (and
	// stops at the budget before reading stdin).
	r := clitest.Run(t, app(), "--model", m, "--ram-budget", "1K", "chat")
	if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, "--ram-budget 1K is below this model's minimum") {
		t.Errorf("--model before chat: exit %d, stderr %q", r.Code, r.Stderr)
	}
	r = clitest.Run(t, app(), "--prompt", "Once upon a", "--temperature", "0", "--model", m, "-n", "3")
	if r.Code != 0 || r.Stdout != onceUponA[:len(" time, there")]+"\n" {
		t.Errorf("exit %d, stdout %q", r.Code, r.Stdout)
	}
}

func TestGenerateTimingLine(t *testing.T) {
	r := clitest.Run(t, app(), "--model", model(t), "--prompt", "Once upon a", "--temperature", "0", "-n", "5")
	if r.Code != 0 || !strings.HasPrefix(onceUponA, strings.TrimSuffix(r.Stdout, "\n")) {
		t.Fatalf("exit %d, stdout %q", r.Code, r.Stdout)
	}
	// L13, L25: pluralised, and the decode steps (N-1) named.
	if !strings.Contains(r.Stderr, "decode: 5 tokens (4 steps), ") || !strings.Contains(r.Stderr, "stop: max_tokens") {
		t.Errorf("timing line %q", r.Stderr)
	}
	r = clitest.Run(t, app(), "--model", model(t), "--prompt-ids", "2995", "--temperature", "0", "-n", "1")
	if !strings.Contains(r.Stderr, "prefill: 1 token, ") || !strings.Contains(r.Stderr, "decode: 1 token (0 steps)") {
		t.Errorf("timing line %q", r.Stderr)
	}
}

// L14: --prompt-file drops one trailing newline and reads stdin for "-".
func TestPromptFile(t *testing.T) {
	m := model(t)
	p := filepath.Join(t.TempDir(), "p.txt")
	os.WriteFile(p, []byte("Once upon a\n"), 0o644)
	want := clitest.Run(t, app(), "--model", m, "--prompt", "Once upon a", "--temperature", "0", "-n", "8").Stdout
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"file", "", []string{"--prompt-file", p}},
		{"stdin", "Once upon a\n", []string{"--prompt-file", "-"}},
		{"stdin-crlf", "Once upon a\r\n", []string{"-f", "-"}},
	} {
		r := clitest.RunWith(t, app(), clitest.Options{Stdin: tc.stdin}, append([]string{"--model", m, "--temperature", "0", "-n", "8"}, tc.args...)...)
		if r.Code != 0 || r.Stdout != want {
			t.Errorf("%s: exit %d, %q; want %q as with --prompt", tc.name, r.Code, r.Stdout, want)
		}
	}
	r := clitest.Run(t, app(), "--model", m, "--prompt-file", filepath.Join(t.TempDir(), "absent"))
	if r.Code != cliutil.ExitFailure || !strings.Contains(r.Stderr, "--prompt-file: open ") {
		t.Errorf("missing file: exit %d, %q", r.Code, r.Stderr)
	}
}

// L1, L13: a value the model lowers is one warning line, not silence.
func TestClampWarnings(t *testing.T) {
	r := clitest.Run(t, app(), "--model", model(t), "--prompt", "hi", "--temperature", "0", "-n", "2",
		"--threads", "100000"[:4], "--max-context", "1000000", "--kv-initial", "2000000", "--expert-cache-slots", "99")
	for _, want := range []string{
		"warning: --threads 1000 is more than the",
		"warning: --max-context 1000000 is more than this model's maximum of",
		"warning: --kv-initial 2000000 is more than the context limit of",
		"warning: --expert-cache-slots 99 is more than the 16 experts per layer; caching all 16",
	} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	if r.Code != 0 {
		t.Errorf("exit %d", r.Code)
	}
}

// M4: a failed write of stdout or of --logits-out fails the run (exit 1)
// with the path and the reason.
func TestWriteErrors(t *testing.T) {
	m := model(t)
	base := []string{"--model", m, "--prompt", "Once upon a", "--temperature", "0", "-n", "5"}
	full := clitest.FailingWriter{Err: &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.ENOSPC}}
	for _, tc := range []struct {
		name   string
		extra  []string
		stdout bool // fail stdout
		stderr string
	}{
		{"stream", nil, true, "nvmai-run: write stdout: no space left on device"},
		{"json", []string{"--json"}, true, "nvmai-run: write stdout: no space left on device"},
		{"logits", []string{"--logits-out", "/dev/full"}, false, "nvmai-run: write --logits-out /dev/full: no space left on device"},
	} {
		if tc.name == "logits" {
			if _, err := os.Stat("/dev/full"); err != nil {
				t.Skip("no /dev/full")
			}
		}
		opt := clitest.Options{}
		if tc.stdout {
			opt.Stdout = full
		}
		r := clitest.RunWith(t, app(), opt, append(base, tc.extra...)...)
		if r.Code != cliutil.ExitFailure || !strings.Contains(r.Stderr, tc.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want 1 and %q", tc.name, r.Code, r.Stderr, tc.stderr)
		}
	}
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full")
	}
	defer f.Close()
	r := clitest.RunWith(t, app(), clitest.Options{Stdout: f}, append(base, "--json")...)
	if r.Code != cliutil.ExitFailure || !strings.Contains(r.Stderr, "write stdout: no space left on device") {
		t.Errorf("--json > /dev/full: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// cancelOnWrite cancels the run's context at the first streamed token, as
// a Ctrl-C during the generation would.
type cancelOnWrite struct {
	cancel context.CancelFunc
	out    strings.Builder
}

func (w *cancelOnWrite) Write(p []byte) (int, error) { w.cancel(); return w.out.Write(p) }

// L10: Ctrl-C keeps the timing line (and with --json a partial object
// whose stop_reason is "interrupted") and exits 130, without the
// converter's "nothing was left half-written".
func TestInterrupt(t *testing.T) {
	m := model(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := &cancelOnWrite{cancel: cancel}
	r := clitest.RunWith(t, app(), clitest.Options{Stdout: w, Ctx: ctx}, "--model", m, "--prompt", "Once upon a", "--temperature", "0", "-n", "50")
	if r.Code != cliutil.ExitInterrupted || !strings.Contains(r.Stderr, "stop: interrupted") || !strings.Contains(r.Stderr, "nvmai-run: interrupted after 1 generated token\n") || strings.Contains(r.Stderr, "half-written") {
		t.Errorf("streaming: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if got := w.out.String(); got != " time\n" {
		t.Errorf("streamed %q, want the first token and a newline", got)
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	r = clitest.RunWith(t, app(), clitest.Options{Ctx: ctx}, "--model", m, "--prompt", "Once upon a", "--json")
	var res map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || r.Code != cliutil.ExitInterrupted {
		t.Fatalf("--json: exit %d, %v, stdout %q", r.Code, err, r.Stdout)
	}
	if res["stop_reason"] != "interrupted" || len(res["prompt_ids"].([]any)) != 5 || !strings.Contains(r.Stderr, "stop: interrupted") {
		t.Errorf("--json partial object %v, stderr %q", res, r.Stderr)
	}
}

// L22, L24, L25: bench reports progress per prompt on stderr, names the
// prefill columns in full and says the decode rate counts steps.
func TestBenchReport(t *testing.T) {
	r := clitest.Run(t, app(), "bench", "--model", model(t), "--tokens", "3", "--skip-bandwidth")
	if r.Code != 0 {
		t.Fatalf("exit %d, %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"bench: prompt 1 of 3 (counting) …\n", "bench: prompt 3 of 3 (code): prefill "} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
	for _, want := range []string{"prefill hit", "prefill read", "prefill wait", "3 generated tokens are 2 steps"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, "pf hit") || strings.Contains(r.Stdout, " GB/s") {
		t.Errorf("report keeps old labels or decimal units:\n%s", r.Stdout)
	}
	if q := clitest.Run(t, app(), "bench", "--model", model(t), "--tokens", "2", "--skip-bandwidth", "--quiet"); q.Stderr != "" {
		t.Errorf("--quiet printed %q", q.Stderr)
	}
}
