package download

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/download/fakehub"
)

func TestNewClientReadsTheEnvironment(t *testing.T) {
	home := t.TempDir()
	cases := []struct {
		name                string
		endpoint, token     string
		tokenFile           string
		wantEndpoint, wantT string
	}{
		{"defaults", "", "", "", DefaultEndpoint, ""},
		{"HF_ENDPOINT trailing slash", "https://mirror.example/", "", "", "https://mirror.example", ""},
		{"HF_TOKEN trimmed", "", " hf_abc\n", "", DefaultEndpoint, "hf_abc"},
		{"token file from hf auth login", "", "", "hf_file\n", DefaultEndpoint, "hf_file"},
		{"HF_TOKEN wins over the file", "", "hf_env", "hf_file", DefaultEndpoint, "hf_env"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HF_ENDPOINT", tc.endpoint)
			t.Setenv("HF_TOKEN", tc.token)
			t.Setenv("HF_TOKEN_PATH", "")
			t.Setenv("HF_HOME", home)
			os.Remove(filepath.Join(home, "token"))
			if tc.tokenFile != "" {
				if err := os.WriteFile(filepath.Join(home, "token"), []byte(tc.tokenFile), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c := NewClient()
			if c.Endpoint != tc.wantEndpoint || c.Token != tc.wantT {
				t.Errorf("endpoint %q token %q, want %q %q", c.Endpoint, c.Token, tc.wantEndpoint, tc.wantT)
			}
			if c.ChunkSize != 64<<20 || c.Parallel != 3 {
				t.Errorf("chunk %d parallel %d, want 64 MiB and 3", c.ChunkSize, c.Parallel)
			}
		})
	}
}

func TestCacheDirFollowsHFHome(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", "/data/hf")
	if d, _ := DefaultCacheDir(); d != "/data/hf/hub" {
		t.Errorf("cache dir %s, want /data/hf/hub", d)
	}
	t.Setenv("HF_HUB_CACHE", "/fast/hub")
	if d, _ := DefaultCacheDir(); d != "/fast/hub" {
		t.Errorf("cache dir %s, want /fast/hub", d)
	}
	t.Setenv("HF_HOME", "")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if d, _ := DefaultCacheDir(); d != "/xdg/huggingface/hub" {
		t.Errorf("cache dir %s, want /xdg/huggingface/hub", d)
	}
}

func TestHTTP1TransportCannotNegotiateHTTP2(t *testing.T) {
	tr := NewHTTP1Transport(nil, time.Second)
	if tr.ForceAttemptHTTP2 {
		t.Error("ForceAttemptHTTP2 is set")
	}
	if tr.TLSNextProto == nil || len(tr.TLSNextProto) != 0 {
		t.Errorf("TLSNextProto = %v, want a non-nil empty map", tr.TLSNextProto)
	}
	if tr.Protocols == nil || !tr.Protocols.HTTP1() || tr.Protocols.HTTP2() || tr.Protocols.UnencryptedHTTP2() {
		t.Errorf("Protocols = %v, want HTTP/1 only", tr.Protocols)
	}
	for _, p := range tr.TLSClientConfig.NextProtos {
		if p == "h2" {
			t.Error(`TLS ALPN offers "h2"`)
		}
	}
}

// A server offering both h2 and http/1.1 over TLS gets HTTP/1.1 from us.
func TestTLSServerOfferingHTTP2IsSpokenToInHTTP1(t *testing.T) {
	h := fakehub.New(t, fakehub.Options{TLS: true})
	files := testFiles()
	h.AddRepo(testRepo, files, fakehub.RepoOptions{})
	c := testClient(t, h)
	c.RootCAs = h.CertPool()
	snap, err := snapshot(t, c, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap.Dir, files)
	for _, r := range h.Requests() {
		if r.Proto != "HTTP/1.1" {
			t.Errorf("%s %s %s served over %s", r.Server, r.Method, r.Path, r.Proto)
		}
	}
}

func TestHTTP2OnlyServersAreRefused(t *testing.T) {
	t.Run("TLS with only h2", func(t *testing.T) {
		s := fakehub.NewHTTP2OnlyTLS(t)
		c := &Client{Endpoint: s.URL, RootCAs: s.CertPool(), MaxRetries: 1,
			RetryWaitMin: time.Millisecond, RetryWaitMax: time.Millisecond, HeaderTimeout: 5 * time.Second}
		_, err := c.ResolveRevision(t.Context(), testRepo, "main")
		if err == nil || !strings.Contains(err.Error(), "HTTP/1.1") || !strings.Contains(err.Error(), "HTTP/2") {
			t.Errorf("error %v does not explain that the server speaks only HTTP/2", err)
		}
		if n := s.Served.Load(); n != 0 {
			t.Errorf("the HTTP/2-only server answered %d requests", n)
		}
	})
	t.Run("cleartext h2 prior knowledge", func(t *testing.T) {
		s := fakehub.NewHTTP2Cleartext(t)
		c := &Client{Endpoint: s.URL, MaxRetries: 5, RetryWaitMin: time.Second, RetryWaitMax: time.Second,
			HeaderTimeout: 5 * time.Second}
		start := time.Now()
		_, err := c.ResolveRevision(t.Context(), testRepo, "main")
		var pe *ProtocolError
		if !errors.As(err, &pe) {
			t.Fatalf("got %v, want a ProtocolError", err)
		}
		if time.Since(start) > 900*time.Millisecond {
			t.Error("a protocol error was retried")
		}
		if !strings.Contains(err.Error(), "HTTP/2 frames") {
			t.Errorf("error %q does not say what the server sent", err)
		}
	})
}

type fakeRoundTripper struct{ resp *http.Response }

func (f fakeRoundTripper) RoundTrip(*http.Request) (*http.Response, error) { return f.resp, nil }

func TestEveryResponseMustBeHTTP1(t *testing.T) {
	rt := http1Only{next: fakeRoundTripper{&http.Response{
		ProtoMajor: 2, Proto: "HTTP/2.0", StatusCode: 200, Body: io.NopCloser(strings.NewReader("")),
	}}}
	req, _ := http.NewRequest(http.MethodGet, "https://cdn.example/x", nil)
	_, err := rt.RoundTrip(req)
	var pe *ProtocolError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "HTTP/2.0") {
		t.Errorf("an HTTP/2 response got %v, want a ProtocolError naming it", err)
	}
}

func TestTokenGoesToTheHubOnly(t *testing.T) {
	h, _, files := newTestHub(t)
	h.AddToken("hf_secret")
	c := testClient(t, h)
	c.Token = "hf_secret"
	snap, err := snapshot(t, c, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap.Dir, files)
	var hub, cdn int
	for _, r := range h.Requests() {
		switch r.Server {
		case "hub":
			hub++
			if r.Authorization != "Bearer hf_secret" {
				t.Errorf("hub request %s %s without the token", r.Method, r.Path)
			}
		case "cdn":
			cdn++
			if r.Authorization != "" {
				t.Errorf("the token was sent to the CDN: %s %s", r.Method, r.Path)
			}
		}
	}
	if hub == 0 || cdn == 0 {
		t.Fatalf("%d hub and %d CDN requests: the test did not exercise both hosts", hub, cdn)
	}
}

// Go keeps Authorization on redirects to subdomains; we must not.
func TestRedirectOffTheHubHostDropsTheToken(t *testing.T) {
	c := &Client{Endpoint: "https://huggingface.co", Token: "hf_secret"}
	cases := []struct {
		to       string
		keepAuth bool
		wantErr  bool
	}{
		{"https://huggingface.co/api/resolve-cache/x", true, false},
		{"https://cdn-lfs.huggingface.co/repos/x", false, false},
		{"https://cas-bridge.xethub.hf.co/x", false, false},
		{"http://huggingface.co/x", false, true},
	}
	for _, tc := range cases {
		from, _ := http.NewRequest(http.MethodGet, "https://huggingface.co/a/b/resolve/main/x", nil)
		to, _ := http.NewRequest(http.MethodGet, tc.to, nil)
		to.Header.Set("Authorization", "Bearer hf_secret")
		err := c.checkRedirect(to, []*http.Request{from})
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err %v, want error %v", tc.to, err, tc.wantErr)
		}
		if got := to.Header.Get("Authorization") != ""; !tc.wantErr && got != tc.keepAuth {
			t.Errorf("%s: Authorization kept = %v, want %v", tc.to, got, tc.keepAuth)
		}
	}
}

func TestNewRequestAttachesTheTokenByHost(t *testing.T) {
	c := &Client{Endpoint: "https://huggingface.co", Token: "hf_secret"}
	for rawURL, want := range map[string]bool{
		"https://huggingface.co/api/models/a/b":      true,
		"https://HuggingFace.co/api/models/a/b":      true,
		"https://huggingface.co:8443/api/models/a/b": false,
		"http://huggingface.co/api/models/a/b":       false,
		"https://cdn-lfs.huggingface.co/x":           false,
		"https://evil.example/huggingface.co":        false,
	} {
		req, err := c.newRequest(t.Context(), http.MethodGet, rawURL)
		if err != nil {
			t.Fatal(err)
		}
		if got := req.Header.Get("Authorization") != ""; got != want {
			u, _ := url.Parse(rawURL)
			t.Errorf("%s (host %s): token attached = %v, want %v", rawURL, u.Host, got, want)
		}
	}
}

func TestBackoffHonoursAndCapsRetryAfter(t *testing.T) {
	c := &Client{RetryAfterMax: 10 * time.Second}
	now := time.Now()
	resp := func(status int, retryAfter string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {retryAfter}}}
	}
	cases := []struct {
		name     string
		resp     *http.Response
		lo, hi   time.Duration
		attempt  int
		min, max time.Duration
	}{
		{"503 seconds", resp(503, "3"), 3 * time.Second, 3 * time.Second, 0, time.Second, 30 * time.Second},
		{"429 capped", resp(429, "3600"), 10 * time.Second, 10 * time.Second, 0, time.Second, 30 * time.Second},
		{"HTTP date", resp(503, now.Add(5*time.Second).UTC().Format(http.TimeFormat)),
			3 * time.Second, 5 * time.Second, 0, time.Second, 30 * time.Second},
		{"date in the past", resp(503, "Mon, 02 Jan 2006 15:04:05 GMT"), 0, 0, 0, time.Second, 30 * time.Second},
		{"garbage falls back to backoff", resp(503, "soon"), time.Second, time.Second, 0, time.Second, 30 * time.Second},
		{"jittered exponential", nil, time.Second, 8 * time.Second, 3, time.Second, 30 * time.Second},
		{"ceiling", nil, time.Second, 30 * time.Second, 40, time.Second, 30 * time.Second},
	}
	for _, tc := range cases {
		for range 20 {
			if d := c.backoff(tc.min, tc.max, tc.attempt, tc.resp); d < tc.lo || d > tc.hi {
				t.Errorf("%s: backoff %v outside [%v, %v]", tc.name, d, tc.lo, tc.hi)
				break
			}
		}
	}
}
