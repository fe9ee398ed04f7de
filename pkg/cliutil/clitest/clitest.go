// Package clitest runs an nvmai command in-process, as the process would
// (cliutil.Main), and returns what it printed and its exit status.
package clitest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
)

// Result is one run: stdout, stderr and the exit status.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Options vary a run: its stdin, and a stdout other than a buffer (a
// failing writer).
type Options struct {
	Stdin  string
	Stdout io.Writer
	Ctx    context.Context
}

// Run runs app with args (without the program name).
func Run(t testing.TB, app *cli.App, args ...string) Result {
	t.Helper()
	return RunWith(t, app, Options{}, args...)
}

// RunWith is Run with Options.
func RunWith(t testing.TB, app *cli.App, opt Options, args ...string) Result {
	t.Helper()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter, app.Reader = &out, &errOut, strings.NewReader(opt.Stdin)
	if opt.Stdout != nil {
		app.Writer = opt.Stdout
	}
	ctx := opt.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	code := cliutil.Main(ctx, app, append([]string{app.Name}, args...))
	r := Result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
	t.Logf("%s %q: exit %d, stderr %q", app.Name, args, code, r.Stderr)
	return r
}

// UsageError runs app with args and checks that it is refused as a usage
// error: exit 2 (cliutil.ExitUsage), nothing on stdout and one line on
// stderr holding want.
func UsageError(t testing.TB, app *cli.App, want string, args ...string) {
	t.Helper()
	r := Run(t, app, args...)
	if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, want) || strings.Count(r.Stderr, "\n") != 1 || r.Stdout != "" {
		t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", args, r.Code, r.Stdout, r.Stderr, want)
	}
}

// FailingWriter fails every write with Err.
type FailingWriter struct{ Err error }

func (w FailingWriter) Write([]byte) (int, error) { return 0, w.Err }
