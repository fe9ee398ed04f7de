package sse

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestKeepAliveFillsSilenceAndStops(t *testing.T) {
	rec := httptest.NewRecorder()
	st := Start(rec, httptest.NewRequest("POST", "/", nil), 20*time.Millisecond, "PING\n\n")
	st.Write("data: a\n\n")
	time.Sleep(80 * time.Millisecond)
	st.StopKeepAlive()
	st.StopKeepAlive() // idempotent
	st.Locked(func(write func(string)) { write("data: b\n\n") })
	st.Close()
	st.Close() // idempotent
	body := rec.Body.String()
	if rec.Header().Get("Content-Type") != "text/event-stream" || !strings.HasPrefix(body, "data: a\n\n") ||
		!strings.Contains(body, "PING\n\n") || !strings.HasSuffix(body, "data: b\n\n") {
		t.Fatalf("stream = %q, headers %v", body, rec.Header())
	}
	st.Write("data: late\n\n")
	if rec.Body.String() != body {
		t.Fatal("a frame was written after Close")
	}
}

// Every protocol's frames come from here: JSON without HTML escaping, a
// value that cannot be encoded dropped rather than half written.
func TestDataAndEventFrames(t *testing.T) {
	rec := httptest.NewRecorder()
	st := Start(rec, httptest.NewRequest("POST", "/", nil), time.Hour, Comment)
	st.Data(map[string]string{"t": "a<b"})
	st.Event("message_stop", map[string]string{"type": "message_stop"})
	st.Data(func() {})
	st.Event("bad", make(chan int))
	st.Close()
	want := "data: {\"t\":\"a<b\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("stream = %q, want %q", got, want)
	}
}

// stuckWriter is a client that never reads: a write blocks until its
// deadline passes, then fails as a connection's would, cancelling the
// connection's context first as net/http does.
type stuckWriter struct {
	http.ResponseWriter
	mu         sync.Mutex
	deadline   time.Time
	changed    chan struct{}
	writes     int
	cancelConn context.CancelFunc
}

func newStuckWriter(cancelConn context.CancelFunc) *stuckWriter {
	return &stuckWriter{ResponseWriter: httptest.NewRecorder(), changed: make(chan struct{}, 1), cancelConn: cancelConn}
}

func (w *stuckWriter) SetWriteDeadline(d time.Time) error {
	w.mu.Lock()
	w.deadline = d
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return nil
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	w.mu.Unlock()
	for {
		w.mu.Lock()
		d := w.deadline
		w.mu.Unlock()
		if !d.IsZero() && !time.Now().Before(d) {
			w.cancelConn()
			return 0, os.ErrDeadlineExceeded
		}
		wait := time.Hour
		if !d.IsZero() {
			wait = time.Until(d)
		}
		select {
		case <-time.After(wait):
		case <-w.changed:
		}
	}
}

// A client that accepts no bytes is cut off: by the write deadline when
// little is queued, at once when the queue overflows; either way the
// request's context is cancelled with ErrStalled, later frames are
// dropped, and Close returns within the write timeout.
func TestStalledClientIsCutOff(t *testing.T) {
	cases := []struct {
		name       string
		frames     int
		maxPending int
		within     time.Duration
	}{
		{"write deadline", 1, 1 << 20, 2 * time.Second},
		{"queue overflow", 1000, 4 << 10, 50 * time.Millisecond}, // long before the 1 s deadline
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, cancelConn := context.WithCancel(context.Background())
			defer cancelConn()
			w := newStuckWriter(cancelConn)
			r, cancel := Prepare(httptest.NewRequest("POST", "/", nil).WithContext(conn), Settings{WriteTimeout: time.Second, MaxPending: tc.maxPending})
			defer cancel(nil)
			start := time.Now()
			st := Start(w, r, time.Hour, Comment)
			for range tc.frames {
				st.Write("data: " + strings.Repeat("x", 100) + "\n\n")
			}
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the request was not cancelled")
			}
			if took := time.Since(start); took > tc.within {
				t.Fatalf("cancelled after %v, want within %v", took, tc.within)
			}
			// The writer notes why just after net/http's cancellation.
			for end := time.Now().Add(time.Second); Stalled(r.Context()) == nil && time.Now().Before(end); {
				time.Sleep(time.Millisecond)
			}
			if why := Stalled(r.Context()); !errors.Is(why, ErrStalled) {
				t.Fatalf("Stalled = %v, want ErrStalled (cause %v)", why, context.Cause(r.Context()))
			}
			st.Write("data: more\n\n")
			closed := time.Now()
			st.Close()
			if time.Since(closed) > 1500*time.Millisecond {
				t.Fatalf("Close took %v", time.Since(closed))
			}
			if st.Err() == nil {
				t.Fatal("Err is nil after the cut")
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.writes > 1 {
				t.Fatalf("%d writes reached the stuck client, want at most 1", w.writes)
			}
		})
	}
}

// A request cancelled elsewhere (the client left, the server stops) ends
// a write blocked on the client at once, not after the write timeout.
func TestCancelledRequestEndsABlockedWrite(t *testing.T) {
	w := newStuckWriter(func() {})
	r, cancel := Prepare(httptest.NewRequest("POST", "/", nil), Settings{WriteTimeout: time.Minute})
	st := Start(w, r, time.Hour, Comment)
	st.Write("data: x\n\n")
	time.Sleep(20 * time.Millisecond)
	cancel(errors.New("shutting down"))
	done := make(chan struct{})
	go func() { st.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited on the blocked write")
	}
	if why := Stalled(r.Context()); why != nil {
		t.Fatalf("a cancelled request is not a stalled client: %v", why)
	}
}
