package cliutil

import (
	"os"
	"os/signal"
)

// Interrupts hands Ctrl-C (SIGINT) to a command that handles it itself, such
// as an interactive loop where Ctrl-C stops one reply rather than the whole
// program. Run's context is cancelled on SIGINT; while an Interrupts is
// active it no longer is (SIGTERM still cancels it), and every SIGINT is
// delivered on C instead.
type Interrupts struct {
	// C receives one value per SIGINT; one press is buffered while nobody
	// reads, further ones are dropped until it is read.
	C    <-chan os.Signal
	sigs chan os.Signal
}

// CatchInterrupts takes SIGINT over until Stop. signal.Ignore first undoes
// every earlier Notify for SIGINT (Run's NotifyContext among them) without
// a moment in which SIGINT would kill the process; Notify then enables it
// again for C alone.
func CatchInterrupts() *Interrupts {
	sigs := make(chan os.Signal, 1)
	signal.Ignore(os.Interrupt)
	signal.Notify(sigs, os.Interrupt)
	return &Interrupts{C: sigs, sigs: sigs}
}

// Stop ends delivery on C. SIGINT then has its default action again (it
// ends the process at once), so call Stop as the command returns.
func (i *Interrupts) Stop() { signal.Stop(i.sigs) }
