package anthropic

import (
	"net/http"
	"sync"
	"time"
)

// sseStream writes Anthropic's server-sent events (event: NAME, data:
// JSON). A keep-alive goroutine sends a ping event whenever the stream has
// been silent for a while (queue waits, long prefills): Claude Code gives
// up on a silent stream and sends the whole turn again.
type sseStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	last    time.Time
	quit    chan struct{}
	wg      sync.WaitGroup
	stopped sync.Once
}

func startStream(w http.ResponseWriter, keepAlive time.Duration) *sseStream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &sseStream{w: w, rc: http.NewResponseController(w), last: time.Now(), quit: make(chan struct{})}
	st.wg.Add(1)
	go st.keepAlive(keepAlive)
	return st
}

var pingEvent = "event: ping\ndata: {\"type\":\"ping\"}\n\n"

func (st *sseStream) keepAlive(every time.Duration) {
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
				st.write(pingEvent)
			}
			st.mu.Unlock()
		}
	}
}

func (st *sseStream) write(s string) {
	st.last = time.Now()
	st.w.Write([]byte(s))
	st.rc.Flush()
}

// event writes one event; v is its data, encoded as JSON.
func (st *sseStream) event(name string, v any) {
	b, err := marshal(v)
	if err != nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.write("event: " + name + "\ndata: " + string(b) + "\n\n")
}

// stop ends the keep-alive pings (idempotent); events can still be written.
func (st *sseStream) stop() {
	st.stopped.Do(func() { close(st.quit) })
	st.wg.Wait()
}
