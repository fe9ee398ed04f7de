package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// recordLog collects the request log records a server emits.
type recordLog struct {
	mu   sync.Mutex
	recs []server.RequestLog
}

func (l *recordLog) log(r server.RequestLog) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
}

func (l *recordLog) records() []server.RequestLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]server.RequestLog(nil), l.recs...)
}

// A request that waits behind a running one says so in its log line: its
// queue wait covers the first one's generation, while the first one, which
// found the engine free, waited for nothing (#39 item 6).
func TestLogLineHasQueueWait(t *testing.T) {
	const tokenDelay = 300 * time.Millisecond // three tokens: the first request runs ≥ 900 ms
	logs := &recordLog{}
	s := server.New(server.Config{Log: logs.log})
	eng := &servertest.Engine{TokenDelay: tokenDelay}
	s.SetEngine(eng, servertest.Renderer{})
	h := serveAll(s, httpapi.Options{})
	post := func(content string) {
		body := `{"messages":[{"role":"user","content":"` + content + `"}]}`
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Host = "127.0.0.1"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("%s: %d %s", content, rec.Code, rec.Body)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); post("first") }()
	for deadline := time.Now().Add(5 * time.Second); len(eng.Prompts()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never reached the engine")
		}
	}
	post("second")
	wg.Wait()
	recs := logs.records()
	if len(recs) != 2 {
		t.Fatalf("want 2 log records, got %d", len(recs))
	}
	first, second := recs[0], recs[1]
	if first.QueueSeconds < 0 || first.QueueSeconds > tokenDelay.Seconds()/3 {
		t.Errorf("the first request found the engine free, yet its queue wait is %.3fs", first.QueueSeconds)
	}
	if second.QueueSeconds < tokenDelay.Seconds() {
		t.Errorf("the second request waited behind a generation of ≥ %v, yet its queue wait is %.3fs", 3*tokenDelay, second.QueueSeconds)
	}
	if second.TTFTSeconds < second.QueueSeconds {
		t.Errorf("the time to first token (%.3fs) counts from arrival, so it includes the queue wait (%.3fs)", second.TTFTSeconds, second.QueueSeconds)
	}
}

// The queue wait is in the text line (queue=…s) and in the JSON object
// (queue_wait_s).
func TestLogFormatsHaveQueueWait(t *testing.T) {
	rec := server.RequestLog{Time: time.Unix(0, 0), Endpoint: "POST /v1/chat/completions", Status: 200, QueueSeconds: 0.25, TTFTSeconds: 0.5}
	var text bytes.Buffer
	server.TextLogger(&text)(rec)
	if !strings.Contains(text.String(), " queue=0.250s ttft=0.500s ") {
		t.Errorf("text line: %s", text.String())
	}
	var js bytes.Buffer
	server.JSONLogger(&js)(rec)
	var obj map[string]any
	if err := json.Unmarshal(js.Bytes(), &obj); err != nil {
		t.Fatal(err)
	}
	if obj["queue_wait_s"] != 0.25 {
		t.Errorf("JSON line: %s", js.String())
	}
}

// A path holding a line feed (%0A) or an escape sequence stays on its own
// request's log line, quoted, instead of forging a second line.
func TestTextLogLineQuotesControlCharacters(t *testing.T) {
	var buf bytes.Buffer
	s := server.New(server.Config{Log: server.TextLogger(&buf)})
	s.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	h := serveAll(s, httpapi.Options{})
	for _, path := range []string{"/x\n2026-01-01T00:00:00Z POST /v1/chat/completions 200", "/\x1b[2Jclear"} {
		buf.Reset()
		if rec := do(h, http.MethodGet, path, "", ""); rec.Code != http.StatusNotFound {
			t.Fatalf("%q: %d", path, rec.Code)
		}
		line := buf.String()
		if strings.Count(line, "\n") != 1 || strings.ContainsRune(line, 0x1b) || !strings.Contains(line, `"GET /`) {
			t.Errorf("%q logged as %q", path, line)
		}
	}
	buf.Reset()
	do(h, http.MethodGet, "/v1/models", "", "")
	if !strings.Contains(buf.String(), "Z GET /v1/models 200 ") {
		t.Errorf("a plain path is logged as it is: %q", buf.String())
	}
}
