package sse

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestKeepAliveFillsSilenceAndStops(t *testing.T) {
	rec := httptest.NewRecorder()
	st := Start(rec, 20*time.Millisecond, "PING\n\n")
	st.Write("data: a\n\n")
	time.Sleep(80 * time.Millisecond)
	st.StopKeepAlive()
	st.StopKeepAlive() // idempotent
	st.Locked(func(write func(string)) { write("data: b\n\n") })
	body := rec.Body.String()
	if rec.Header().Get("Content-Type") != "text/event-stream" || !strings.HasPrefix(body, "data: a\n\n") ||
		!strings.Contains(body, "PING\n\n") || !strings.HasSuffix(body, "data: b\n\n") {
		t.Fatalf("stream = %q, headers %v", body, rec.Header())
	}
	n := strings.Count(body, "PING")
	time.Sleep(40 * time.Millisecond)
	if strings.Count(rec.Body.String(), "PING") != n {
		t.Fatal("a keep-alive was written after StopKeepAlive")
	}
}
