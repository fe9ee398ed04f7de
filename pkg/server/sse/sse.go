// Package sse writes Server-Sent Events streams for every protocol adapter:
// the headers, flushed frames, and a keep-alive goroutine that writes a
// protocol-chosen frame (an SSE comment, Anthropic's ping event) whenever
// the stream has been silent for a while (queue waits, long prefills),
// since clients and proxies give up on silence.
package sse

import (
	"net/http"
	"sync"
	"time"
)

// Comment is the keep-alive frame of protocols without their own.
const Comment = ": keep-alive\n\n"

// Stream is one response being streamed. Its methods are safe for
// concurrent use with the keep-alive goroutine.
type Stream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	last    time.Time
	quit    chan struct{}
	wg      sync.WaitGroup
	stopped sync.Once
}

// Start writes the 200 and the SSE headers and starts keep-alives: ping is
// written when nothing was written for 3/4 of every.
func Start(w http.ResponseWriter, every time.Duration, ping string) *Stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &Stream{w: w, rc: http.NewResponseController(w), last: time.Now(), quit: make(chan struct{})}
	st.wg.Add(1)
	go st.keepAlive(every, ping)
	return st
}

func (st *Stream) keepAlive(every time.Duration, ping string) {
	defer st.wg.Done()
	tick := time.NewTicker(max(every/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-st.quit:
			return
		case <-tick.C:
			st.mu.Lock()
			if time.Since(st.last) >= every*3/4 {
				st.write(ping)
			}
			st.mu.Unlock()
		}
	}
}

func (st *Stream) write(s string) {
	st.last = time.Now()
	st.w.Write([]byte(s))
	st.rc.Flush()
}

// Write writes one frame and flushes it.
func (st *Stream) Write(frame string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.write(frame)
}

// Locked runs fn with the stream held, so that what fn numbers or orders
// (a sequence number) is written in that order; fn writes with write.
func (st *Stream) Locked(fn func(write func(frame string))) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fn(st.write)
}

// StopKeepAlive ends the keep-alives (idempotent); frames can still be
// written.
func (st *Stream) StopKeepAlive() {
	st.stopped.Do(func() { close(st.quit) })
	st.wg.Wait()
}
