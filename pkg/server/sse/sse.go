// Package sse writes Server-Sent Events streams for every protocol adapter:
// the headers, flushed frames, and a keep-alive frame (an SSE comment,
// Anthropic's ping event) whenever the stream has been silent for a while
// (queue waits, long prefills), since clients and proxies give up on
// silence.
//
// Frames are written to the client by a goroutine of the stream, not by
// the caller: the engine's token callback only appends to a bounded
// buffer, so a client that reads slowly or not at all never holds the one
// generation slot. A client that lets the buffer fill (MaxPending unread
// bytes beyond what the kernel holds), or that accepts no bytes for
// WriteTimeout, is cut off: its request's context is cancelled (so the
// engine stops and frees the slot) and later frames are dropped.
package sse

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nvmai/nvmai/pkg/server/internal/jsonobj"
)

// Comment is the keep-alive frame of protocols without their own.
const Comment = ": keep-alive\n\n"

// Defaults of Settings.
const (
	DefaultWriteTimeout = 20 * time.Second
	DefaultMaxPending   = 1 << 20
)

// writeChunk bounds one write to the connection, so that the write
// deadline measures a lack of progress, not a slow transfer of a backlog.
const writeChunk = 32 << 10

// ErrStalled is the cause a stream cancels its request with when the
// client stopped reading.
var ErrStalled = errors.New("the client stopped reading the stream")

// Settings are the limits of the streams of one request; the shared HTTP
// layer attaches them with Prepare.
type Settings struct {
	WriteTimeout time.Duration // most time one write may make no progress (default 20 s)
	MaxPending   int           // most bytes queued for a client that does not read (default 1 MiB)
}

type settingsKey struct{}

type prepared struct {
	Settings
	cancel context.CancelCauseFunc
	stall  *stallNote
}

// stallNote keeps why a stream cut its client off for not reading: a
// write that times out also makes net/http cancel the request's context
// (as if the client had left), which may win the race to set its cause.
type stallNote struct {
	mu  sync.Mutex
	err error
}

func (n *stallNote) set(err error) {
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.err == nil {
		n.err = err
	}
	n.mu.Unlock()
}

// Stalled reports why a stream of the request whose context is ctx (as
// Prepare returned it) cut its client off for not reading, or nil.
func Stalled(ctx context.Context) error {
	p, ok := ctx.Value(settingsKey{}).(prepared)
	if !ok {
		return nil
	}
	p.stall.mu.Lock()
	defer p.stall.mu.Unlock()
	return p.stall.err
}

// Prepare returns r with a context that a Stream started on it cancels
// (with a cause wrapping ErrStalled) when the client stops reading, and
// the function that cancels it otherwise (the caller must call it when
// the request ends).
func Prepare(r *http.Request, s Settings) (*http.Request, context.CancelCauseFunc) {
	if s.WriteTimeout <= 0 {
		s.WriteTimeout = DefaultWriteTimeout
	}
	if s.MaxPending <= 0 {
		s.MaxPending = DefaultMaxPending
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	ctx = context.WithValue(ctx, settingsKey{}, prepared{Settings: s, cancel: cancel, stall: &stallNote{}})
	return r.WithContext(ctx), cancel
}

// Stream is one response being streamed. Its methods are safe for
// concurrent use.
type Stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	set     Settings
	cancel  context.CancelCauseFunc // nil when the request was not prepared
	stall   *stallNote              // nil when the request was not prepared
	every   time.Duration
	ping    string
	kick    chan struct{} // a frame was queued, or Close was called
	done    chan struct{} // the writer goroutine has returned
	stopCtx func() bool   // stops watching the request's context

	mu        sync.Mutex
	pending   []byte
	last      time.Time // the last frame queued
	keepAlive bool
	closing   bool
	finished  bool  // Close returned: the ResponseWriter is no longer touched
	err       error // why the stream was cut off; frames are dropped after
}

// Start writes the 200 and the SSE headers and starts the writer: ping is
// written when nothing was written for 3/4 of every. Close must be called
// before the handler returns.
func Start(w http.ResponseWriter, r *http.Request, every time.Duration, ping string) *Stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	st := &Stream{w: w, rc: http.NewResponseController(w), every: every, ping: ping, last: time.Now(), keepAlive: true,
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	ctx := r.Context()
	if p, ok := ctx.Value(settingsKey{}).(prepared); ok {
		st.set, st.cancel, st.stall = p.Settings, p.cancel, p.stall
	} else {
		st.set = Settings{WriteTimeout: DefaultWriteTimeout, MaxPending: DefaultMaxPending}
	}
	// The status line goes out with the first frame, under the write
	// deadline; headers alone are not flushed here.
	w.WriteHeader(http.StatusOK)
	// A request cancelled for any reason (the client left, the server
	// shuts down) also ends a write that is blocked on the client.
	st.stopCtx = context.AfterFunc(ctx, func() { st.fail(context.Cause(ctx)) })
	go st.run()
	return st
}

func (st *Stream) run() {
	defer close(st.done)
	tick := time.NewTicker(max(st.every/4, time.Millisecond))
	defer tick.Stop()
	var buf []byte
	for {
		st.mu.Lock()
		if st.keepAlive && len(st.pending) == 0 && time.Since(st.last) >= st.every*3/4 {
			st.pending = append(st.pending, st.ping...)
			st.last = time.Now()
		}
		buf, st.pending = st.pending, buf[:0]
		closing, failed := st.closing, st.err != nil
		st.mu.Unlock()
		if failed {
			return
		}
		if len(buf) > 0 {
			if err := st.send(buf); err != nil {
				st.fail(err)
				return
			}
			continue
		}
		if closing {
			return
		}
		select {
		case <-st.kick:
		case <-tick.C:
		}
	}
}

// send writes b in chunks, each under a fresh write deadline, flushing
// each. A write that fails once its deadline has passed means the client
// stopped reading (fail aborts writes with a deadline in the past).
func (st *Stream) send(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		st.mu.Lock()
		if st.err != nil {
			st.mu.Unlock()
			return st.err
		}
		deadline := time.Now().Add(st.set.WriteTimeout)
		// Under mu, so that fail's deadline in the past is not overwritten.
		if err := st.rc.SetWriteDeadline(deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
			st.mu.Unlock()
			return err
		}
		st.mu.Unlock()
		_, err := st.w.Write(b[:n])
		if err == nil {
			if err = st.rc.Flush(); errors.Is(err, http.ErrNotSupported) {
				err = nil
			}
		}
		if err != nil {
			if !time.Now().Before(deadline) {
				err = fmt.Errorf("%w: it accepted no bytes for %v", ErrStalled, st.set.WriteTimeout)
				st.stall.set(err)
			}
			return err
		}
		b = b[n:]
	}
	return nil
}

// fail cuts the stream off: later frames are dropped, a write blocked on
// the client returns, and the request's context is cancelled so that the
// engine stops. After Close it does nothing.
func (st *Stream) fail(cause error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.failLocked(cause)
}

func (st *Stream) failLocked(cause error) {
	if st.err != nil || st.finished {
		return
	}
	if cause == nil {
		cause = context.Canceled
	}
	if errors.Is(cause, ErrStalled) {
		st.stall.set(cause)
	}
	st.err = cause
	st.pending = nil
	st.rc.SetWriteDeadline(time.Unix(1, 0))
	if st.cancel != nil {
		st.cancel(cause) // runs the AfterFunc in its own goroutine: no deadlock on mu
	}
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// queue appends a frame; mu is held.
func (st *Stream) queue(frame string) {
	if st.err != nil || st.closing {
		return
	}
	if n := len(st.pending) + len(frame); n > st.set.MaxPending {
		st.failLocked(fmt.Errorf("%w: %d bytes were waiting for it (the most is %d)", ErrStalled, n, st.set.MaxPending))
		return
	}
	st.pending = append(st.pending, frame...)
	st.last = time.Now()
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// Data queues the frame "data: JSON" of v (OpenAI's streams); a value
// that cannot be encoded is dropped.
func (st *Stream) Data(v any) {
	if b, err := jsonobj.Marshal(v); err == nil {
		st.Write("data: " + string(b) + "\n\n")
	}
}

// Event queues the frame "event: NAME" with "data: JSON" of v (Anthropic's
// and Responses' streams); a value that cannot be encoded is dropped.
func (st *Stream) Event(name string, v any) {
	if f, err := EventFrame(name, v); err == nil {
		st.Write(f)
	}
}

// EventFrame is the frame Event writes, for a caller that numbers its
// events under Locked.
func EventFrame(name string, v any) (string, error) {
	b, err := jsonobj.Marshal(v)
	if err != nil {
		return "", err
	}
	return "event: " + name + "\ndata: " + string(b) + "\n\n", nil
}

// Write queues one frame; the stream's goroutine writes and flushes it.
func (st *Stream) Write(frame string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.queue(frame)
}

// Locked runs fn with the stream held, so that what fn numbers or orders
// (a sequence number) is written in that order; fn writes with write.
func (st *Stream) Locked(fn func(write func(frame string))) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fn(st.queue)
}

// Err reports why the stream was cut off (nil while it is not).
func (st *Stream) Err() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.err
}

// StopKeepAlive ends the keep-alives (idempotent); frames can still be
// written.
func (st *Stream) StopKeepAlive() {
	st.mu.Lock()
	st.keepAlive = false
	st.mu.Unlock()
}

// Close writes what is queued (each write bounded by WriteTimeout) and
// stops the stream's goroutine; later frames are dropped. It is
// idempotent, and must be called before the handler returns.
func (st *Stream) Close() {
	st.mu.Lock()
	st.closing, st.keepAlive = true, false
	st.mu.Unlock()
	select {
	case st.kick <- struct{}{}:
	default:
	}
	<-st.done
	st.stopCtx()
	st.mu.Lock()
	st.finished = true
	st.mu.Unlock()
}
