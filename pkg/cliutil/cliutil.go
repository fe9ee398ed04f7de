// Package cliutil is what every nvmai command shares: running a urfave/cli
// app with signal-aware cancellation, mapping errors to exit codes in one
// place, and progress output that is a bar on a terminal and quiet lines
// otherwise.
package cliutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// Exit codes shared by every nvmai command.
const (
	ExitOK          = 0
	ExitFailure     = 1   // the work failed (bad input, I/O error, failed check)
	ExitUsage       = 2   // the command line is wrong
	ExitInterrupted = 130 // Ctrl-C
)

// ExitCode maps an error to the process exit status.
func ExitCode(err error) int {
	var ue *UsageError
	var ec cli.ExitCoder
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &ec):
		return ec.ExitCode()
	}
	return ExitFailure
}

// Run runs app on os.Args with a context cancelled on SIGINT/SIGTERM and
// exits with Main's status; a failed close of stdout (the last write to a
// file can fail only there) is a failure too.
func Run(app *cli.App) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills at once
	}()
	stopProfile := startProfile(app.Name)
	code := Main(ctx, app, os.Args)
	stopProfile()
	if err := os.Stdout.Close(); err != nil && code == ExitOK && !errors.Is(err, os.ErrClosed) {
		fmt.Fprintf(os.Stderr, "%s: close stdout: %v\n", app.Name, err)
		code = ExitFailure
	}
	os.Exit(code)
}

// Main prepares app (Prepare), normalizes args (NormalizeArgs), runs it,
// prints any error as one "NAME: error" line on app.ErrWriter and returns
// the exit status. Everything written to app.Writer (stdout when unset)
// goes through a checked writer: a failed write makes a successful run
// fail with the reason. Tests run a command in-process through Main.
func Main(ctx context.Context, app *cli.App, args []string) int {
	Prepare(app)
	if app.Writer == nil {
		app.Writer = os.Stdout
	}
	if app.ErrWriter == nil {
		app.ErrWriter = os.Stderr
	}
	out := NewOutput(app.Writer, "stdout")
	app.Writer = out
	args, err := NormalizeArgs(app, args)
	if err == nil {
		err = app.RunContext(ctx, args)
	}
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		if line := errorLine(err); line != "" {
			fmt.Fprintf(app.ErrWriter, "%s: %s\n", app.Name, line)
		}
	}
	return ExitCode(err)
}

// errorLine is what the user reads about err.
func errorLine(err error) string {
	var ue *UsageError
	var ie *InterruptedError
	switch {
	case errors.As(err, &ie):
		return ie.Msg
	case errors.Is(err, context.Canceled):
		return "interrupted; nothing was left half-written"
	case errors.As(err, &ue):
		return ue.Line()
	}
	return err.Error()
}

// InterruptedError is a run stopped by Ctrl-C (exit 130) whose message says
// what was kept; without one Main says nothing was left half-written, which
// is true of the commands that write files atomically.
type InterruptedError struct{ Msg string }

func (e *InterruptedError) Error() string { return e.Msg }
func (e *InterruptedError) Unwrap() error { return context.Canceled }

// ProfileEnv names a file that receives a CPU profile of the whole command
// (go tool pprof reads it).
const ProfileEnv = "NVMAI_CPUPROFILE"

func startProfile(name string) func() {
	path := os.Getenv(ProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, ProfileEnv, err)
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// Progress reports byte progress: a bar on a terminal, a line every few
// seconds otherwise, nothing when quiet.
type Progress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	desc  string
	last  time.Time
	ended bool
	start time.Time
}

// NewProgress starts a progress report on stderr.
func NewProgress(desc string, quiet bool) *Progress {
	p := &Progress{desc: desc, start: time.Now(), last: time.Now()}
	if quiet {
		return p
	}
	if IsTerminal(os.Stderr) {
		p.bar = progressbar.NewOptions64(-1, progressbar.OptionSetDescription(desc), progressbar.OptionShowBytes(true), progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetWriter(os.Stderr), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionFullWidth(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
		return p
	}
	p.w = os.Stderr
	return p
}

// Update sets the bytes done out of total.
func (p *Progress) Update(done, total int64) {
	if p.bar != nil {
		if p.bar.GetMax64() != total {
			p.bar.ChangeMax64(total)
		}
		p.bar.Set64(done)
		return
	}
	if p.w == nil || p.ended || time.Since(p.last) < 5*time.Second && done < total {
		return
	}
	p.ended = done >= total
	p.last = time.Now()
	secs := time.Since(p.start).Seconds()
	fmt.Fprintf(p.w, "%s: %s of %s (%s)\n", p.desc, Bytes(done), Bytes(total), Rate(float64(done)/max(secs, 1e-9)))
}

// Finish ends the bar at 100%.
func (p *Progress) Finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

// End ends the bar: at 100% when the work succeeded, where it stopped
// otherwise (a failed or interrupted run must not look complete).
func (p *Progress) End(err error) {
	if err == nil {
		p.Finish()
		return
	}
	if p.bar != nil {
		p.bar.Exit()
		fmt.Fprintln(os.Stderr)
	}
}
