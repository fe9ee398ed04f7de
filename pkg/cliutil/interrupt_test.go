package cliutil

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// While Interrupts is active a SIGINT reaches C and leaves a context that
// signal.NotifyContext (as Run sets up) made for SIGINT uncancelled.
func TestCatchInterruptsTakesSIGINTFromTheRootContext(t *testing.T) {
	root, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	intr := CatchInterrupts()
	defer intr.Stop()
	for press := 1; press <= 2; press++ {
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-intr.C:
		case <-time.After(5 * time.Second):
			t.Fatalf("press %d: SIGINT never reached Interrupts.C", press)
		}
	}
	select {
	case <-root.Done():
		t.Fatal("SIGINT cancelled the root context although Interrupts had taken it")
	case <-time.After(100 * time.Millisecond):
	}
}
