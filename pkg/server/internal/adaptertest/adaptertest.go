// Package adaptertest is the test harness the protocol adapters (openai,
// anthropic, responses) and the model directory share: the official SDK
// clients pointed at a test server, the embedded tiny model behind a real
// runtime engine, and the wait for goroutines to wind down after a client
// goes away. It is for tests only.
package adaptertest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	nvmairuntime "github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/server"
)

// OpenAIClient is the OpenAI SDK's client of the server at hs (its /v1/
// routes), sending key, with no retries.
func OpenAIClient(hs *httptest.Server, key string) oai.Client {
	return oai.NewClient(oaioption.WithBaseURL(hs.URL+"/v1/"), oaioption.WithAPIKey(key), oaioption.WithMaxRetries(0), oaioption.WithHTTPClient(hs.Client()))
}

// AnthropicClient is the Anthropic SDK's client of the server at hs,
// sending key, with no retries, and the extra options after those.
func AnthropicClient(hs *httptest.Server, key string, extra ...anthropicoption.RequestOption) anthropic.Client {
	opts := append([]anthropicoption.RequestOption{anthropicoption.WithBaseURL(hs.URL), anthropicoption.WithAPIKey(key), anthropicoption.WithMaxRetries(0), anthropicoption.WithHTTPClient(hs.Client())}, extra...)
	return anthropic.NewClient(opts...)
}

// TinyEngine loads the embedded tiny model, converted at 8 bits once per
// test run (the test binary's TestMain calls fixinstall.RemoveAll), with
// two threads; the test's clean-up closes it.
func TinyEngine(t *testing.T) *nvmairuntime.Engine {
	t.Helper()
	e, err := nvmairuntime.Load(fixinstall.Install(t, testfix.Embedded(t), 8), nvmairuntime.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// TinyServer serves e through a runtime engine with opt behind a core
// server with the plain ChatML renderer and no request log; the adapter
// under test mounts its handler on the server.
func TinyServer(e *nvmairuntime.Engine, opt server.RuntimeOptions) (*server.Server, *server.RuntimeEngine) {
	re := server.NewRuntimeEngine(e, opt)
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(re, server.PlainChatML{})
	return s, re
}

// WaitGoroutines waits up to within for the goroutine count to fall back to
// at most n, and fails the test with every goroutine's stack if it does not.
func WaitGoroutines(t testing.TB, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, baseline %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// AbandonRequest checks that a client going away mid-request frees the
// engine and leaves no goroutine behind: it posts body (JSON) to path on
// hs, cancels the request after 100 ms, polls free until it reports the
// engine free for another request (failing after 3 s), and waits for the
// goroutine count to fall back to what it was before the request.
func AbandonRequest(t *testing.T, hs *httptest.Server, path, body string, free func() bool) {
	t.Helper()
	hs.Client().Get(hs.URL + "/health") // warm the connection pool
	hs.CloseClientConnections()
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	start := time.Now()
	if resp, err := hs.Client().Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for !free() {
		if time.Since(start) > 3*time.Second {
			t.Fatal("the engine stayed busy after the client left")
		}
		time.Sleep(20 * time.Millisecond)
	}
	hs.CloseClientConnections()
	hs.Client().CloseIdleConnections()
	WaitGoroutines(t, base, 3*time.Second)
}

// OpenAIError is the error of an OpenAI-style envelope,
// {"error":{"message","type","param"}}.
type OpenAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
}

// DecodeOpenAIError reads body as an OpenAI-style error envelope, failing
// the test when it is not one (no JSON, or no error type).
func DecodeOpenAIError(t testing.TB, body string) OpenAIError {
	t.Helper()
	var env struct {
		Error OpenAIError `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error.Type == "" {
		t.Fatalf("body %q is not an error envelope (%v)", body, err)
	}
	return env.Error
}

// LogBuffer collects what a server logs while its handlers run, safe for
// the concurrent writes and reads of a test.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
