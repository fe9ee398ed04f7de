package anthropic

import (
	"net/http"
	"time"

	"github.com/nvmai/nvmai/pkg/server/internal/jsonobj"
	"github.com/nvmai/nvmai/pkg/server/sse"
)

// sseStream writes Anthropic's server-sent events (event: NAME, data:
// JSON). A ping event is sent whenever the stream has been silent for a
// while (queue waits, long prefills): Claude Code gives up on a silent
// stream and sends the whole turn again. A client that stops reading is
// cut off (see package sse).
type sseStream struct{ *sse.Stream }

func startStream(w http.ResponseWriter, r *http.Request, keepAlive time.Duration) *sseStream {
	return &sseStream{sse.Start(w, r, keepAlive, pingEvent)}
}

var pingEvent = "event: ping\ndata: {\"type\":\"ping\"}\n\n"

// event writes one event; v is its data, encoded as JSON.
func (st *sseStream) event(name string, v any) {
	b, err := jsonobj.Marshal(v)
	if err != nil {
		return
	}
	st.Write("event: " + name + "\ndata: " + string(b) + "\n\n")
}

// stop ends the keep-alive pings (idempotent); events can still be written.
func (st *sseStream) stop() { st.StopKeepAlive() }

// close writes what is queued and ends the stream (idempotent).
func (st *sseStream) close() { st.Close() }
