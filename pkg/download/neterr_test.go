package download

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/download/fakehub"
)

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// silentServer accepts connections and never answers.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A Hub that cannot be reached is named with the class of the failure and
// the retries made, and every retry was announced.
func TestUnreachableHubSaysWhyAndHowOftenItTried(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, c *Client) // sets the endpoint
		cause    string
		attempts int
	}{
		{"DNS", func(t *testing.T, c *Client) {
			c.Endpoint = "http://hub.nvmai-test.example"
			c.dial = func(context.Context, string, string) (net.Conn, error) {
				return nil, &net.OpError{Op: "dial", Net: "tcp",
					Err: &net.DNSError{Err: "no such host", Name: "hub.nvmai-test.example", IsNotFound: true}}
			}
		}, CauseDNS, 3},
		{"connection refused", func(t *testing.T, c *Client) { c.Endpoint = "http://" + closedPort(t) }, CauseRefused, 3},
		{"timeout", func(t *testing.T, c *Client) {
			c.Endpoint = "http://" + silentServer(t)
			c.HeaderTimeout = 100 * time.Millisecond
		}, CauseTimeout, 3},
		{"TLS", func(t *testing.T, c *Client) {
			h := fakehub.New(t, fakehub.Options{TLS: true})
			c.Endpoint = h.URL // its certificate is not trusted: c.RootCAs is nil
		}, CauseTLS, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testClient(t, fakehub.New(t, fakehub.Options{}))
			c.MaxRetries = 2
			var mu sync.Mutex
			var notices []RetryNotice
			c.OnRetry = func(n RetryNotice) {
				mu.Lock()
				defer mu.Unlock()
				notices = append(notices, n)
			}
			tc.setup(t, c)
			_, err := c.ResolveRevision(context.Background(), testRepo, "main")
			var ne *NetworkError
			if !errors.As(err, &ne) {
				t.Fatalf("got %T %v, want a *NetworkError", err, err)
			}
			if ne.Cause != tc.cause || ne.Attempts != tc.attempts || !ne.Hub {
				t.Errorf("cause %q, %d attempts, hub %v; want %q, %d, true", ne.Cause, ne.Attempts, ne.Hub, tc.cause, tc.attempts)
			}
			host := strings.TrimPrefix(strings.TrimPrefix(c.Endpoint, "http://"), "https://")
			for _, w := range []string{"cannot reach the Hub at " + host, "(" + tc.cause + ": "} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if tc.attempts > 1 && !strings.Contains(err.Error(), "gave up after 3 attempts (2 retries)") {
				t.Errorf("error does not say how often it tried: %v", err)
			}
			if len(notices) != tc.attempts-1 {
				t.Fatalf("%d retry notices, want %d: %v", len(notices), tc.attempts-1, notices)
			}
			for i, n := range notices {
				line := n.String()
				if n.Retry != i+1 || !strings.Contains(line, "of 2: GET "+c.Endpoint) || !strings.Contains(line, tc.cause) {
					t.Errorf("notice %d: %q", i, line)
				}
			}
		})
	}
}

// A server's own error status is not a network failure.
func TestHTTPErrorIsNotANetworkError(t *testing.T) {
	h, _, _ := newTestHub(t)
	c := testClient(t, h)
	_, err := c.ResolveRevision(context.Background(), testRepo, "nosuchbranch")
	var ne *NetworkError
	if err == nil || errors.As(err, &ne) || !strings.Contains(err.Error(), `revision "nosuchbranch" does not exist`) {
		t.Errorf("got %v", err)
	}
}
