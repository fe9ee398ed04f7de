package main

import (
	"fmt"
	"io"
)

// finisher is the part of cliutil.Progress that endProgress drives.
type finisher interface{ Finish() }

// endProgress completes the progress bar only when the run succeeded: a
// failed or interrupted conversion must not show 100% (review L5). On
// failure it ends the bar's line instead, so the error starts a line of
// its own.
func endProgress(p finisher, err error, barShown bool, stderr io.Writer) {
	switch {
	case err == nil:
		p.Finish()
	case barShown:
		fmt.Fprintln(stderr)
	}
}
