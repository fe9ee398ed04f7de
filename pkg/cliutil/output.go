package cliutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Output is a writer that remembers its first failure, so that output a
// command prints with fmt.Fprint* (which drops errors) still fails the
// command: "write stdout: no space left on device". After a failure every
// write fails at once.
type Output struct {
	mu   sync.Mutex
	w    io.Writer
	name string
	err  error
}

// NewOutput wraps w; name says what w is in errors ("stdout", a path).
func NewOutput(w io.Writer, name string) *Output { return &Output{w: w, name: name} }

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		o.err = &WriteError{Name: o.name, Err: err}
		return n, o.err
	}
	return n, nil
}

// Err is the first write error, nil if every write succeeded.
func (o *Output) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// WriteError is a failed write, flush or close of an output (exit 1).
type WriteError struct {
	Name string // "stdout", or the file's path
	Err  error
}

func (e *WriteError) Error() string {
	var pe *os.PathError
	if errors.As(e.Err, &pe) {
		return fmt.Sprintf("write %s: %v", e.Name, pe.Err)
	}
	return fmt.Sprintf("write %s: %v", e.Name, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }

// CloseFile closes f, an output file named name, and reports a failure as
// a WriteError; it returns err unchanged when err is already set (the
// first error wins).
func CloseFile(f *os.File, name string, err error) error {
	cerr := f.Close()
	if err != nil {
		return err
	}
	if cerr != nil {
		return &WriteError{Name: name, Err: cerr}
	}
	return nil
}
