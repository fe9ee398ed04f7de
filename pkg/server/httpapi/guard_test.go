package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

func fakeHandler(opt httpapi.Options) *httpapi.Host {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	return serveAll(s, opt)
}

// A web page in the user's browser cannot drive the server: no JSON
// content type, a foreign Host (DNS rebinding) or a foreign Origin is
// refused, while programs, loopback names and configured names and
// origins are served (#44 A6).
func TestBrowserRequestsAreRefused(t *testing.T) {
	const body = `{"prompt":"p","max_tokens":1}`
	keyed := httpapi.Options{APIKey: "k", ListenHost: "0.0.0.0"}
	cases := []struct {
		name   string
		opt    httpapi.Options
		host   string
		header map[string]string
		status int
	}{
		{"loopback address", httpapi.Options{}, "127.0.0.1:8080", nil, 200},
		{"other loopback address", httpapi.Options{}, "127.0.0.2", nil, 200},
		{"localhost", httpapi.Options{}, "localhost:8080", nil, 200},
		{"localhost, any case, final dot", httpapi.Options{}, "LocalHost.:9", nil, 200},
		{"IPv6 loopback", httpapi.Options{}, "[::1]:8080", nil, 200},
		{"foreign host", httpapi.Options{}, "attacker.example:8080", nil, 403},
		{"foreign host without a port", httpapi.Options{}, "attacker.example", nil, 403},
		{"name that ends in localhost", httpapi.Options{}, "evil-localhost:8080", nil, 403},
		{"--allowed-host", httpapi.Options{AllowedHosts: []string{"box.lan"}}, "box.lan:8080", nil, 200},
		{"--allowed-host with its port", httpapi.Options{AllowedHosts: []string{"box.lan:8080"}}, "box.lan:8080", nil, 200},
		{"--allowed-host with another port", httpapi.Options{AllowedHosts: []string{"box.lan:8080"}}, "box.lan:9090", nil, 403},
		{"--host", httpapi.Options{ListenHost: "127.0.0.1"}, "127.0.0.1:8080", nil, 200},
		{"with a key any host", keyed, "192.168.1.5:8080", map[string]string{"x-api-key": "k"}, 200},
		{"with a key and --allowed-host", httpapi.Options{APIKey: "k", AllowedHosts: []string{"api.example"}}, "other.example", map[string]string{"x-api-key": "k"}, 403},
		{"with a key and --allowed-host, named", httpapi.Options{APIKey: "k", AllowedHosts: []string{"api.example"}}, "api.example:443", map[string]string{"x-api-key": "k"}, 200},
		{"foreign origin", httpapi.Options{}, "127.0.0.1:8080", map[string]string{"Origin": "http://attacker.example"}, 403},
		{"null origin", httpapi.Options{}, "127.0.0.1:8080", map[string]string{"Origin": "null"}, 403},
		{"same origin", httpapi.Options{}, "127.0.0.1:8080", map[string]string{"Origin": "http://127.0.0.1:8080"}, 200},
		{"same host, other port", httpapi.Options{}, "127.0.0.1:8080", map[string]string{"Origin": "http://127.0.0.1:3000"}, 403},
		{"--cors-origin", httpapi.Options{CORSOrigin: "https://good.example"}, "127.0.0.1:8080", map[string]string{"Origin": "https://good.example"}, 200},
		{"--cors-origin other", httpapi.Options{CORSOrigin: "https://good.example"}, "127.0.0.1:8080", map[string]string{"Origin": "https://evil.example"}, 403},
		{"--cors-origin *", httpapi.Options{CORSOrigin: "*"}, "127.0.0.1:8080", map[string]string{"Origin": "https://any.example"}, 200},
		{"foreign origin with a key", keyed, "127.0.0.1:8080", map[string]string{"Origin": "http://attacker.example", "x-api-key": "k"}, 403},
		{"no content type", httpapi.Options{}, "127.0.0.1:8080", map[string]string{"Content-Type": ""}, 415},
		{"text/plain", httpapi.Options{}, "127.0.0.1:8080", map[string]string{"Content-Type": "text/plain"}, 415},
		{"form", httpapi.Options{}, "127.0.0.1:8080", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"json with charset", httpapi.Options{}, "127.0.0.1:8080", map[string]string{"Content-Type": "application/json; charset=utf-8"}, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
			req.Host = tc.host
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tc.header {
				if v == "" {
					req.Header.Del(k)
				} else {
					req.Header.Set(k, v)
				}
			}
			rec := httptest.NewRecorder()
			fakeHandler(tc.opt).ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body.String(), tc.status)
			}
		})
	}
	t.Run("GET from a foreign origin", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/v1/models", nil)
		req.Header.Set("Origin", "http://attacker.example")
		rec := httptest.NewRecorder()
		fakeHandler(httpapi.Options{}).ServeHTTP(rec, req)
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), "--cors-origin http://attacker.example") {
			t.Fatalf("%d %s", rec.Code, rec.Body.String())
		}
	})
}

// Without the key, /health says only that the server is up, a 404 lists
// no endpoints, and a key that shares a prefix with the real one is
// refused (#44 A2, A3, A5).
func TestWithoutTheKeyTheServerSaysLittle(t *testing.T) {
	h := fakeHandler(httpapi.Options{APIKey: "secret"})
	get := func(path, key string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}
	cases := []struct {
		name, path, key string
		status          int
		want, wantNot   string
	}{
		{"health without key", "/health", "", 200, `{"status":"ok"}`, "goroutines"},
		{"health with a wrong key", "/health", "secre", 200, `{"status":"ok"}`, "goroutines"},
		{"health with the key", "/health", "secret", 200, `"goroutines"`, ""},
		{"404 without key", "/debug/pprof", "", 404, "no endpoint /debug/pprof", "/v1/chat/completions"},
		{"404 with the key", "/debug/pprof", "secret", 404, "/v1/chat/completions", ""},
		{"key prefix", "/v1/models", "secre", 401, "", ""},
		{"key extended", "/v1/models", "secrets", 401, "", ""},
		{"the key", "/v1/models", "secret", 200, "fake-model", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, body := get(tc.path, tc.key)
			if st != tc.status || !strings.Contains(body, tc.want) || tc.wantNot != "" && strings.Contains(body, tc.wantNot) {
				t.Fatalf("%d %s, want %d with %q without %q", st, body, tc.status, tc.want, tc.wantNot)
			}
			if tc.name == "health without key" && body != `{"status":"ok"}` {
				t.Fatalf("body %s", body)
			}
		})
	}
}

// A refusal written before the body was read is sent at once and closes
// the connection, instead of net/http reading the rest of the body (up
// to 256 KB, for up to the 60 s ReadTimeout) first; a declared
// Content-Length over --max-body is refused before any of it is read,
// with Expect: 100-continue too (#44 S20, S10).
func TestRefusalsBeforeTheBodyAreImmediate(t *testing.T) {
	oh := fakeHandler(httpapi.Options{APIKey: "k", MaxBody: 1 << 20})
	hs := httptest.NewUnstartedServer(oh)
	hs.Config = httpapi.NewHTTPServer(oh)
	hs.Start()
	defer hs.Close()
	addr := hs.Listener.Addr().String()
	partial := `{"messages":[`
	cases := []struct {
		name, headers string
		status        string
	}{
		{"no key, partial body", "Content-Type: application/json\r\nContent-Length: 100000\r\n", "401"},
		{"no content type, partial body", "x-api-key: k\r\nContent-Length: 100000\r\n", "415"},
		{"declared length over --max-body", "x-api-key: k\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n", "413"},
		{"declared length over --max-body, expect 100-continue", "x-api-key: k\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\nExpect: 100-continue\r\n", "413"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\n%s\r\n%s", addr, tc.headers, partial)
			start := time.Now()
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if took := time.Since(start); !strings.HasPrefix(resp.Status, tc.status) || took > 2*time.Second {
				t.Fatalf("%s after %v, want %s at once", resp.Status, took, tc.status)
			}
			if !resp.Close {
				t.Fatal("no Connection: close")
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("the server kept the connection open: %v", err)
			}
		})
	}
}

// When every connection the server allows is open and idle (keep-alive
// connections between requests, connections that sent nothing, or only
// part of their headers or body), a new client is served: the
// longest-idle connection is closed for it (#44 S19, S20). Before, it
// waited for the 120 s IdleTimeout (10 s ReadHeaderTimeout, 60 s
// ReadTimeout).
func TestIdleConnectionsDoNotLockClientsOut(t *testing.T) {
	for _, mode := range []string{"keep-alive after GET /health", "nothing sent", "slow headers", "partial body"} {
		t.Run(mode, func(t *testing.T) {
			oh := fakeHandler(httpapi.Options{})
			hs := httptest.NewUnstartedServer(oh)
			hs.Config = httpapi.NewHTTPServer(oh)
			hs.Listener = httpapi.LimitConnections(hs.Config, hs.Listener, 4)
			hs.Start()
			defer hs.Close()
			addr := hs.Listener.Addr().String()
			for range 4 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				switch mode {
				case "nothing sent":
					continue
				case "slow headers":
					fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\n", addr)
					continue
				case "partial body":
					fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\":", addr)
					continue
				}
				fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			time.Sleep(50 * time.Millisecond)
			status, _, took := rawExchange(t, addr, fmt.Sprintf("GET /health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr))
			if !strings.HasPrefix(status, "200") || took > 5*time.Second {
				t.Fatalf("%s after %v", status, took)
			}
		})
	}
}

// Busy connections are not closed for a newcomer: it waits for one to
// finish.
func TestBusyConnectionsAreNotClosedForANewcomer(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}, QueueLimit: 4})
	s.SetEngine(&servertest.Engine{PrefillDelay: 500 * time.Millisecond}, servertest.Renderer{})
	oh := serveAll(s, httpapi.Options{})
	hs := httptest.NewUnstartedServer(oh)
	hs.Config = httpapi.NewHTTPServer(oh)
	hs.Listener = httpapi.LimitConnections(hs.Config, hs.Listener, 1)
	hs.Start()
	defer hs.Close()
	addr := hs.Listener.Addr().String()
	done := make(chan string, 1)
	go func() {
		st, _, _ := rawExchange(t, addr, fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"prompt\":\"p\"}", addr))
		done <- st
	}()
	time.Sleep(100 * time.Millisecond)
	st, _, took := rawExchange(t, addr, fmt.Sprintf("GET /health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr))
	if first := <-done; !strings.HasPrefix(first, "200") {
		t.Fatalf("the busy connection's request: %s", first)
	}
	if !strings.HasPrefix(st, "200") || took < 300*time.Millisecond {
		t.Fatalf("newcomer: %s after %v, want 200 after the busy one finished", st, took)
	}
}
