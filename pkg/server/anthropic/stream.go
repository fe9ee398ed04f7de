package anthropic

import (
	"net/http"
	"time"

	"github.com/nvmai/nvmai/pkg/server/sse"
)

// sseStream writes Anthropic's server-sent events (event: NAME, data:
// JSON). A keep-alive goroutine sends a ping event whenever the stream has
// been silent for a while (queue waits, long prefills): Claude Code gives
// up on a silent stream and sends the whole turn again.
type sseStream struct{ *sse.Stream }

func startStream(w http.ResponseWriter, keepAlive time.Duration) *sseStream {
	return &sseStream{sse.Start(w, keepAlive, pingEvent)}
}

var pingEvent = "event: ping\ndata: {\"type\":\"ping\"}\n\n"

// event writes one event; v is its data, encoded as JSON.
func (st *sseStream) event(name string, v any) {
	b, err := marshal(v)
	if err != nil {
		return
	}
	st.Write("event: " + name + "\ndata: " + string(b) + "\n\n")
}

// stop ends the keep-alive pings (idempotent); events can still be written.
func (st *sseStream) stop() { st.StopKeepAlive() }
