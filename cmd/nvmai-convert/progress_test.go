package main

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

type countingBar struct{ finished int }

func (b *countingBar) Finish() { b.finished++ }

func TestEndProgressCompletesOnlyOnSuccess(t *testing.T) {
	cases := []struct {
		name     string
		err      error
		barShown bool
		finished int
		newline  bool
	}{
		{"success", nil, true, 1, false},
		{"interrupted on a terminal", context.Canceled, true, 0, true},
		{"failed on a terminal", errors.New("disk full"), true, 0, true},
		{"failed, no bar", errors.New("disk full"), false, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var bar countingBar
			var stderr bytes.Buffer
			endProgress(&bar, tc.err, tc.barShown, &stderr)
			if bar.finished != tc.finished || (stderr.Len() > 0) != tc.newline {
				t.Errorf("Finish called %d times, stderr %q; want %d and newline %v", bar.finished, stderr.String(), tc.finished, tc.newline)
			}
		})
	}
}
