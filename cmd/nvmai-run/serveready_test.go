package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

// serveUntilReady runs serve with args in-process, as clitest.Run does, and
// stops it (as Ctrl-C would) as soon as its ready line is on stderr, instead
// of letting it serve for a fixed time: the tests that use it check what
// serve says up to that line and that it stops cleanly. A server not ready
// within a minute is stopped then, and its missing ready line fails the
// caller's checks.
func serveUntilReady(t *testing.T, args ...string) clitest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	errOut := &readyWatch{cancel: cancel}
	a := app()
	a.Writer, a.ErrWriter, a.Reader = &out, errOut, strings.NewReader("")
	args = append([]string{"serve"}, args...)
	code := cliutil.Main(ctx, a, append([]string{a.Name}, args...))
	r := clitest.Result{Stdout: out.String(), Stderr: errOut.String(), Code: code}
	t.Logf("%s %q: exit %d, stderr %q", a.Name, args, code, r.Stderr)
	return r
}

// readyWatch collects serve's stderr and cancels the run once the ready
// line has been written.
type readyWatch struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *readyWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), "nvmai-run serve: ready at ") {
		w.cancel()
	}
	return n, err
}

func (w *readyWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
