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

// UsageError marks a command-line mistake (exit 2).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef builds a UsageError.
func Usagef(format string, args ...any) error { return &UsageError{fmt.Sprintf(format, args...)} }

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

// Run runs app with a context cancelled on SIGINT/SIGTERM, prints any error
// as "NAME: error" on stderr and exits with ExitCode.
func Run(app *cli.App) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app.ExitErrHandler = func(*cli.Context, error) {} // we map errors ourselves
	app.UseShortOptionHandling = true
	stopProfile := startProfile(app.Name)
	err := app.RunContext(ctx, os.Args)
	stopProfile()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("interrupted; nothing was left half-written")
			fmt.Fprintf(os.Stderr, "%s: %v\n", app.Name, err)
			os.Exit(ExitInterrupted)
		}
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(os.Stderr, "%s: %s\n", app.Name, msg)
		}
	}
	os.Exit(ExitCode(err))
}

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
		p.bar = progressbar.NewOptions64(-1, progressbar.OptionSetDescription(desc), progressbar.OptionShowBytes(true),
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
	fmt.Fprintf(p.w, "%s: %s of %s (%.0f MB/s)\n", p.desc, HumanBytes(done), HumanBytes(total), float64(done)/1e6/max(secs, 1e-9))
}

// Finish ends the bar.
func (p *Progress) Finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

// HumanBytes formats n with binary units.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
