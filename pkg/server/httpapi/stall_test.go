package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/anthropic"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/openai"
	"github.com/nvmai/nvmai/pkg/server/responses"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serveAll is the host with every protocol mounted, as serve wires it.
func serveAll(s *server.Server, opt httpapi.Options) *httpapi.Host {
	h := httpapi.New(s, opt)
	openai.New(s, openai.Options{}).Mount(h)
	anthropic.New(s, anthropic.Options{}).Mount(h)
	responses.New(s, responses.Options{Log: io.Discard}).Mount(h)
	return h
}

// stallServer serves every protocol over a fake engine that writes 5,000
// tokens of 4 KiB each (20 MiB, more than the kernel's socket buffers and
// the stream's queue hold), on a real listener with NewHTTPServer.
func stallServer(t *testing.T, opt httpapi.Options, tokenDelay time.Duration) (*httptest.Server, *httpapi.Host, *lockedBuffer) {
	t.Helper()
	big := strings.Repeat("x", 4096)
	script := make([]string, 5000)
	for i := range script {
		script[i] = big
	}
	logs := &lockedBuffer{}
	s := server.New(server.Config{Log: server.TextLogger(logs)})
	s.SetEngine(&servertest.Engine{Context: 8192, TokenDelay: tokenDelay, Script: func(prompt string) []string {
		if strings.Contains(prompt, "short") {
			return []string{"ok"}
		}
		return script
	}}, servertest.Renderer{})
	oh := serveAll(s, opt)
	hs := httptest.NewUnstartedServer(oh)
	hs.Config = httpapi.NewHTTPServer(oh)
	hs.Start()
	t.Cleanup(hs.Close)
	return hs, oh, logs
}

// openHog sends a streamed request on a connection with a small receive
// buffer and never reads the answer.
func openHog(t *testing.T, hs *httptest.Server, path, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, hs.Listener.Addr(), len(body), body)
	return c
}

var hogRequests = []struct{ name, path, body string }{
	{"chat", "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"long"}]}`},
	{"completions", "/v1/completions", `{"stream":true,"max_tokens":8000,"prompt":"long"}`},
	{"anthropic", "/v1/messages", `{"model":"m","max_tokens":8000,"stream":true,"messages":[{"role":"user","content":"long"}]}`},
	{"responses", "/v1/responses", `{"stream":true,"input":"long"}`},
}

// A streaming client that stops reading is cut off and frees the one
// generation slot, so that the next client is answered, in every protocol
// (#44 S18). Before, the engine blocked in the stream's write for as long
// as the connection stayed open.
func TestStalledStreamFreesTheEngine(t *testing.T) {
	for _, tc := range hogRequests {
		t.Run(tc.name, func(t *testing.T) {
			hs, _, logs := stallServer(t, httpapi.Options{StreamWriteTimeout: 2 * time.Second}, 0)
			hs.Client().Get(hs.URL + "/health") // warm the pool
			base := runtime.NumGoroutine()
			hog := openHog(t, hs, tc.path, tc.body)
			defer hog.Close()
			time.Sleep(50 * time.Millisecond) // the hog's request goes first
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/completions", strings.NewReader(`{"prompt":"short","max_tokens":1}`))
			req.Header.Set("Content-Type", "application/json")
			start := time.Now()
			resp, err := hs.Client().Do(req)
			if err != nil {
				t.Fatalf("the second client was not answered while the hog holds its stream: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("second client: %d", resp.StatusCode)
			}
			t.Logf("second client answered after %v", time.Since(start))
			cutLogged := func() bool {
				l := logs.String()
				return strings.Contains(l, tc.path+" 499") && strings.Contains(l, "stream cut off: the client stopped reading")
			}
			for end := time.Now().Add(5 * time.Second); !cutLogged() && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			if !cutLogged() {
				t.Fatalf("the log does not show the hog cut off with 499:\n%s", logs.String())
			}
			hog.Close()
			hs.Client().CloseIdleConnections()
			adaptertest.WaitGoroutines(t, base, 5*time.Second)
		})
	}
}

// Shutting down cuts off a stream whose client does not read, at once
// (#44 S25: Shutdown used to wait for it, then fail with "context
// deadline exceeded").
func TestCutOffEndsStalledStreamsForShutdown(t *testing.T) {
	hs, oh, logs := stallServer(t, httpapi.Options{StreamWriteTimeout: time.Minute}, time.Millisecond)
	hog := openHog(t, hs, "/v1/chat/completions", hogRequests[0].body)
	defer hog.Close()
	time.Sleep(300 * time.Millisecond) // the stream is under way
	if n := oh.CutOff(); n != 1 {
		t.Fatalf("CutOff cut %d requests, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := hs.Config.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "POST /v1/chat/completions 503") || !strings.Contains(l, "server is shutting down") {
		t.Fatalf("log:\n%s", l)
	}
}

// A client that leaves is logged as 499, not as a 500 (#44 S21).
func TestClientThatLeavesIsLogged499(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			hs, _, logs := stallServer(t, httpapi.Options{}, 5*time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/chat/completions",
				strings.NewReader(fmt.Sprintf(`{"stream":%v,"messages":[{"role":"user","content":"long"}]}`, stream)))
			req.Header.Set("Content-Type", "application/json")
			time.AfterFunc(100*time.Millisecond, cancel)
			if resp, err := hs.Client().Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			deadline := time.Now().Add(3 * time.Second)
			for !strings.Contains(logs.String(), "/v1/chat/completions") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			l := logs.String()
			if !strings.Contains(l, "POST /v1/chat/completions 499") || !strings.Contains(l, "client closed the request") {
				t.Fatalf("log:\n%s", l)
			}
		})
	}
}

// rawExchange writes raw to a new connection and returns the status line
// and headers of the answer, and how long it took.
func rawExchange(t *testing.T, addr, raw string) (string, http.Header, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	return resp.Status, resp.Header, time.Since(start)
}

// A client that closes its connection as soon as it has read a stream's
// end got the whole answer: it is logged 200, not 499.
func TestClientClosingAfterTheEndIsLogged200(t *testing.T) {
	hs, _, logs := stallServer(t, httpapi.Options{}, 0)
	const n = 20
	for range n {
		c, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		body := `{"stream":true,"messages":[{"role":"user","content":"short"}]}`
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", hs.Listener.Addr(), len(body), body)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		sc := bufio.NewScanner(c)
		for sc.Scan() && sc.Text() != "data: [DONE]" {
		}
		c.Close()
	}
	for end := time.Now().Add(3 * time.Second); strings.Count(logs.String(), "\n") < n && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if l := logs.String(); strings.Count(l, "POST /v1/chat/completions 200") != n {
		t.Fatalf("want %d lines with 200:\n%s", n, l)
	}
}
