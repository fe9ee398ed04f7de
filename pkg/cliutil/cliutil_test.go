package cliutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/urfave/cli/v2"
)

// testApp is a small command tree like nvmai-run's: app flags, a
// subcommand sharing some of them, and one with its own.
func testApp(got *[]string) *cli.App {
	record := func(c *cli.Context) error {
		*got = append(*got, fmt.Sprintf("%s model=%s n=%d json=%v args=%q", c.Command.Name, c.String("model"), c.Int("n"), c.Bool("json"), c.Args().Slice()))
		return nil
	}
	shared := func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}},
			IntRange(&cli.IntFlag{Name: "n", Value: 1}, 1, 10, ""),
			&cli.BoolFlag{Name: "json"},
		}
	}
	return &cli.App{
		Name:   "tool",
		Flags:  append(shared(), &cli.StringFlag{Name: "prompt"}),
		Action: record,
		Commands: []*cli.Command{
			{Name: "chat", Flags: shared(), Action: record},
			{Name: "golden", Flags: []cli.Flag{&cli.StringFlag{Name: "models-dir"}}, Action: record,
				Subcommands: []*cli.Command{{Name: "deep", Flags: []cli.Flag{&cli.BoolFlag{Name: "json"}}, Action: record}}},
		},
	}
}

func TestNormalizeArgs(t *testing.T) {
	for _, tc := range []struct {
		args, want []string
		err        string
	}{
		{args: []string{"x", "--model", "M"}, want: []string{"x", "--model", "M"}},
		{args: []string{"x", "pos", "--model", "M", "--json"}, want: []string{"x", "--model", "M", "--json", "pos"}},
		{args: []string{"x", "pos", "--n=3", "-m", "M"}, want: []string{"x", "--n=3", "-m", "M", "pos"}},
		{args: []string{"x", "--model", "M", "chat"}, want: []string{"x", "chat", "--model", "M"}},
		{args: []string{"x", "--model", "M", "chat", "--n", "2"}, want: []string{"x", "chat", "--model", "M", "--n", "2"}},
		{args: []string{"x", "--help", "chat"}, want: []string{"x", "--help", "chat"}},
		{args: []string{"x", "--bogus", "chat"}, want: []string{"x", "--bogus", "chat"}},
		{args: []string{"x", "--prompt", "hi", "chat"}, err: "--prompt does not apply to tool chat"},
		{args: []string{"x", "--json", "golden", "deep"}, err: "--json does not apply to tool golden"},
		{args: []string{"x", "golden", "--json", "deep"}, want: []string{"x", "golden", "deep", "--json"}}, // deep defines it
		{args: []string{"x", "golden", "deep", "a", "--json"}, want: []string{"x", "golden", "deep", "--json", "a"}},
		{args: []string{"x", "--model", "chat"}, want: []string{"x", "--model", "chat"}}, // chat is --model's value
		{args: []string{"x", "--prompt", "-v", "a"}, want: []string{"x", "--prompt", "-v", "a"}},
		{args: []string{"x", "a", "--", "--json"}, want: []string{"x", "a", "--", "--json"}},
		{args: []string{"x", "--", "chat", "--json"}, want: []string{"x", "--", "chat", "--json"}},
		{args: []string{"x", "-", "--json"}, want: []string{"x", "--json", "-"}},
	} {
		var got []string
		out, err := NormalizeArgs(testApp(&got), tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(out, tc.want) {
			t.Errorf("%q: got %q, %v; want %q", tc.args, out, err, tc.want)
		}
	}
}

// TestMain runs the whole path (Prepare, NormalizeArgs, the parse and the
// error line) and checks exit status, stderr and stdout.
func TestMainExitAndMessages(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		code         int
		stderr, call string
	}{
		{args: []string{"--model", "M", "a"}, call: `tool model=M n=1 json=false args=["a"]`},
		{args: []string{"a", "--model", "M", "--n", "3"}, call: `tool model=M n=3 json=false args=["a"]`},
		{args: []string{"--model", "M", "chat", "--n", "4"}, call: `chat model=M n=4 json=false args=[]`},
		{args: []string{"--modle", "M"}, code: ExitUsage, stderr: "tool: unknown flag --modle; did you mean --model? (see tool --help)\n"},
		{args: []string{"chat", "--jsn"}, code: ExitUsage, stderr: "tool: unknown flag --jsn; did you mean --json? (see tool chat --help)\n"},
		{args: []string{"chat", "--zzzzzz"}, code: ExitUsage, stderr: "tool: unknown flag --zzzzzz (see tool chat --help)\n"},
		{args: []string{"golden", "deep", "--jsno"}, code: ExitUsage, stderr: "tool: unknown flag --jsno; did you mean --json? (see tool golden deep --help)\n"},
		{args: []string{"--n", "abc"}, code: ExitUsage, stderr: `tool: invalid value "abc" for -n: want a whole number (see tool --help)` + "\n"},
		{args: []string{"--n", "99999999999999999999999"}, code: ExitUsage, stderr: "too large"},
		{args: []string{"--n", "0"}, code: ExitUsage, stderr: "tool: -n 0 is out of range: use 1 to 10 (see tool --help)\n"},
		{args: []string{"chat", "--n", "11"}, code: ExitUsage, stderr: "tool: -n 11 is out of range: use 1 to 10 (see tool chat --help)\n"},
		{args: []string{"--model"}, code: ExitUsage, stderr: "tool: --model needs a value (see tool --help)\n"},
		{args: []string{"--prompt", "p", "chat"}, code: ExitUsage, stderr: "tool: --prompt does not apply to tool chat (see tool chat --help)\n"},
		{args: []string{"--version"}, code: ExitOK},
	} {
		var calls []string
		app := testApp(&calls)
		var out, errOut bytes.Buffer
		app.Writer, app.ErrWriter = &out, &errOut
		code := Main(context.Background(), app, append([]string{"tool"}, tc.args...))
		if code != tc.code || !strings.Contains(errOut.String(), tc.stderr) || (tc.stderr != "" && strings.Count(errOut.String(), "\n") != 1) {
			t.Errorf("%q: exit %d, stderr %q; want %d, %q", tc.args, code, errOut.String(), tc.code, tc.stderr)
		}
		if tc.code == ExitUsage && out.Len() > 0 {
			t.Errorf("%q: usage error printed %q on stdout", tc.args, out.String())
		}
		if tc.call != "" && (len(calls) != 1 || calls[0] != tc.call) {
			t.Errorf("%q: ran %q, want %q", tc.args, calls, tc.call)
		}
	}
}

func TestVersion(t *testing.T) {
	var calls []string
	app := testApp(&calls)
	var out bytes.Buffer
	app.Writer = &out
	if code := Main(context.Background(), app, []string{"tool", "--version"}); code != 0 || !strings.HasPrefix(out.String(), "tool devel") {
		t.Errorf("--version: exit %d, %q; want \"tool devel…\"", code, out.String())
	}
}

func TestErrorLinesAndCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		line string
	}{
		{nil, ExitOK, ""},
		{errors.New("boom"), ExitFailure, "boom"},
		{Usagef("bad"), ExitUsage, "bad"},
		{&UsageError{Msg: "bad", Help: "tool sub"}, ExitUsage, "bad (see tool sub --help)"},
		{&UsageError{Msg: "bad, see tool --help", Help: "tool"}, ExitUsage, "bad, see tool --help"},
		{fmt.Errorf("x: %w", context.Canceled), ExitInterrupted, "interrupted; nothing was left half-written"},
		{&InterruptedError{Msg: "interrupted after 3 tokens"}, ExitInterrupted, "interrupted after 3 tokens"},
		{&WriteError{Name: "stdout", Err: &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.ENOSPC}}, ExitFailure, "write stdout: no space left on device"},
		{cli.Exit("", 1), ExitFailure, ""},
	} {
		line := ""
		if tc.err != nil {
			line = errorLine(tc.err)
		}
		if got := ExitCode(tc.err); got != tc.code || line != tc.line {
			t.Errorf("%v: exit %d, line %q; want %d, %q", tc.err, got, line, tc.code, tc.line)
		}
	}
}

func TestWriteFailureFailsTheRun(t *testing.T) {
	app := &cli.App{Name: "tool", Action: func(c *cli.Context) error { fmt.Fprintln(c.App.Writer, "result"); return nil }}
	var errOut bytes.Buffer
	app.Writer, app.ErrWriter = failingWriter{syscall.ENOSPC}, &errOut
	if code := Main(context.Background(), app, []string{"tool"}); code != ExitFailure || errOut.String() != "tool: write stdout: no space left on device\n" {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full")
	}
	defer f.Close()
	app = &cli.App{Name: "tool", Action: func(c *cli.Context) error { fmt.Fprintln(c.App.Writer, "result"); return nil }}
	errOut.Reset()
	app.Writer, app.ErrWriter = f, &errOut
	if code := Main(context.Background(), app, []string{"tool"}); code != ExitFailure || !strings.Contains(errOut.String(), "no space left on device") {
		t.Errorf("/dev/full: exit %d, stderr %q", code, errOut.String())
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

func TestSuggestFlag(t *testing.T) {
	flags := []cli.Flag{&cli.StringFlag{Name: "prompt", Aliases: []string{"p"}}, &cli.StringFlag{Name: "prompt-file"}, &cli.IntFlag{Name: "max-tokens"}, &cli.IntFlag{Name: "top-k"}}
	for _, tc := range []struct{ typed, want string }{
		{"promt", "prompt"}, {"prompt-fil", "prompt-file"}, {"max-token", "max-tokens"}, {"maxtokens", "max-tokens"},
		{"bogus", ""}, {"x", ""}, {"top-p", "top-k"}, {"hepl", "help"},
	} {
		if got := suggestFlag(tc.typed, flags); got != tc.want {
			t.Errorf("%q: suggested %q, want %q", tc.typed, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"promt", "prompt", 1}, {"kitten", "sitting", 3}, {"abc", "abc", 0}} {
		if got := editDistance(tc.a, tc.b); got != tc.d {
			t.Errorf("%q %q: %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}

func TestHelpText(t *testing.T) {
	app := &cli.App{Name: "tool", UsageText: "tool --a\n   tool --b",
		Flags: []cli.Flag{&cli.IntFlag{Name: "threads", Usage: "compute threads (default: all cores)"}}}
	var out bytes.Buffer
	app.Writer = &out
	Main(context.Background(), app, []string{"tool", "--help"})
	help := out.String()
	if !strings.Contains(help, "   tool --a\n   tool --b\n") {
		t.Errorf("USAGE lines not aligned:\n%s", help)
	}
	if !strings.Contains(help, "compute threads (default: all cores)\n") || strings.Count(help, "all cores") != 1 {
		t.Errorf("default shown other than once:\n%s", help)
	}
}

func TestChecks(t *testing.T) {
	if err := CheckRange("threads", -4, 0, 4096, "0 = all cores"); err == nil || err.Error() != "--threads -4 is out of range: use 0 to 4096 (0 = all cores)" {
		t.Errorf("CheckRange: %v", err)
	}
	if err := CheckRange("n", 5, 1, 10, ""); err != nil {
		t.Errorf("in range: %v", err)
	}
	for _, tc := range []struct {
		value string
		ok    bool
		err   string
	}{{"", false, ""}, {"200", true, ""}, {"0", true, ""}, {"-5", false, "NVMAI_TEST_ENV=-5: use a whole number from 0 to 1000"}, {"abc", false, "use a whole number"}, {"1001", false, "from 0 to 1000"}} {
		t.Setenv("NVMAI_TEST_ENV", tc.value)
		_, ok, err := EnvInt("NVMAI_TEST_ENV", 0, 1000, "")
		if ok != tc.ok || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) || ExitCode(err) != map[bool]int{true: ExitOK, false: ExitUsage}[tc.err == ""] {
			t.Errorf("%q: ok %v, err %v", tc.value, ok, err)
		}
	}
}

func TestExclusive(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"x"}, ""},
		{[]string{"x", "--a", "1"}, ""},
		{[]string{"x", "--a", "1", "--b", "2"}, "give -a or -b, not both"},
		{[]string{"x", "--a", "1", "--b", "2", "--c"}, "give only one of -a, -b, -c"},
	} {
		var got error
		app := &cli.App{Name: "x", Flags: []cli.Flag{&cli.StringFlag{Name: "a"}, &cli.StringFlag{Name: "b"}, &cli.BoolFlag{Name: "c"}},
			Action: func(c *cli.Context) error { got = Exclusive(c, "a", "b", "c"); return nil }}
		app.Writer, app.ErrWriter = &bytes.Buffer{}, &bytes.Buffer{}
		Main(context.Background(), app, tc.args)
		if (tc.err == "") != (got == nil) || got != nil && got.Error() != tc.err {
			t.Errorf("%q: %v, want %q", tc.args, got, tc.err)
		}
	}
}
