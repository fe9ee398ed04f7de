package download

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Defaults for a Client made by NewClient.
const (
	DefaultEndpoint      = "https://huggingface.co"
	DefaultChunkSize     = 64 << 20
	DefaultParallel      = 3
	DefaultStallBytes    = 64 << 10
	DefaultStallWindow   = 20 * time.Second
	DefaultMaxRetries    = 5
	DefaultRetryWaitMin  = 1 * time.Second
	DefaultRetryWaitMax  = 30 * time.Second
	DefaultRetryAfterMax = 2 * time.Minute
	DefaultHeaderTimeout = 60 * time.Second
)

// Client talks to one Hub endpoint. Set its fields before the first call;
// the HTTP transport is built from them on first use and not rebuilt.
type Client struct {
	// Endpoint is the Hub base URL without a trailing slash
	// (HF_ENDPOINT, default https://huggingface.co).
	Endpoint string
	// Token is sent as a bearer token to the Endpoint's host only.
	Token string
	// RootCAs, when set, replaces the system roots (tests, private mirrors).
	RootCAs *x509.CertPool

	// ChunkSize is the length of one Range request.
	ChunkSize int64
	// Parallel bounds the requests in flight across all files.
	Parallel int
	// StallBytes and StallWindow define the stall floor: an attempt that
	// receives fewer than StallBytes during any StallWindow is aborted and
	// its chunk retried. StallBytes <= 0 disables the floor.
	StallBytes  int64
	StallWindow time.Duration
	// MaxRetries bounds the retries of one request (after the first try).
	MaxRetries int
	// RetryWaitMin and RetryWaitMax bound the jittered exponential backoff;
	// RetryAfterMax caps a server's Retry-After.
	RetryWaitMin, RetryWaitMax, RetryAfterMax time.Duration
	// HeaderTimeout bounds the wait for response headers.
	HeaderTimeout time.Duration

	// FreeSpace reports the bytes available to an unprivileged user on the
	// filesystem holding path; nil means statfs. Tests inject it.
	FreeSpace func(path string) (uint64, error)

	// Offline refuses every request (HF_HUB_OFFLINE, nvmai-install
	// --offline): Snapshot then reads the cache alone.
	Offline bool
	// OnRetry, when set, is told about every request about to be retried
	// (from several goroutines at once), so retries are never silent.
	OnRetry func(RetryNotice)

	// dial replaces the transport's dialer: a test seam for faults that
	// loopback cannot produce (a DNS failure).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	initOnce  sync.Once
	transport http.RoundTripper
}

// NewClient returns a Client with the defaults above, the endpoint from
// HF_ENDPOINT and the token from HF_TOKEN (or the token file written by
// `hf auth login`: $HF_TOKEN_PATH, else $HF_HOME/token).
func NewClient() *Client {
	endpoint := strings.TrimRight(os.Getenv("HF_ENDPOINT"), "/")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	return &Client{
		Endpoint:      endpoint,
		Token:         tokenFromEnvironment(),
		ChunkSize:     DefaultChunkSize,
		Parallel:      DefaultParallel,
		StallBytes:    DefaultStallBytes,
		StallWindow:   DefaultStallWindow,
		MaxRetries:    DefaultMaxRetries,
		RetryWaitMin:  DefaultRetryWaitMin,
		RetryWaitMax:  DefaultRetryWaitMax,
		RetryAfterMax: DefaultRetryAfterMax,
		HeaderTimeout: DefaultHeaderTimeout,
		Offline:       OfflineFromEnvironment(),
	}
}

func tokenFromEnvironment() string {
	if t := strings.TrimSpace(os.Getenv("HF_TOKEN")); t != "" {
		return t
	}
	path := os.Getenv("HF_TOKEN_PATH")
	if path == "" {
		home, err := HFHome()
		if err != nil {
			return ""
		}
		path = filepath.Join(home, "token")
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 4096 {
		return ""
	}
	// A trailing newline would make an invalid header.
	return strings.TrimSpace(string(b))
}

// HFHome is $HF_HOME, else $XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface.
func HFHome() (string, error) {
	if h := os.Getenv("HF_HOME"); h != "" {
		return h, nil
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "huggingface"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("locate the Hugging Face cache: %w (set HF_HOME)", err)
	}
	return filepath.Join(home, ".cache", "huggingface"), nil
}

// DefaultCacheDir is the hub cache other tools use: $HF_HUB_CACHE, else
// $HF_HOME/hub.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d, nil
	}
	home, err := HFHome()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, "hub"), nil
}

// NewHTTP1Transport returns a transport that can only speak HTTP/1.1. It is a
// fresh value, not a Clone of http.DefaultTransport, whose TLS config would
// keep offering "h2" in ALPN (hf-download.md §3.5). rootCAs may be nil.
func NewHTTP1Transport(rootCAs *x509.CertPool, headerTimeout time.Duration) *http.Transport {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	return &http.Transport{
		Proxy:       http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig: &tls.Config{
			RootCAs:    rootCAs,
			NextProtos: []string{"http/1.1"},
			MinVersion: tls.VersionTLS12,
		},
		Protocols:             &protocols,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		ForceAttemptHTTP2:     false,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   16, // the default 2 would reconnect for every 3rd chunk
		// We checksum raw bytes; the Range header already stops transparent
		// gzip, this also covers the unranged requests.
		DisableCompression: true,
	}
}

func (c *Client) roundTripper() http.RoundTripper {
	c.initOnce.Do(func() {
		t := NewHTTP1Transport(c.RootCAs, c.HeaderTimeout)
		if c.dial != nil {
			t.DialContext = c.dial
		}
		c.transport = http1Only{next: t}
	})
	return c.transport
}

func (c *Client) endpointURL() (*url.URL, error) {
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("the Hub endpoint %q is not an http(s) URL: check HF_ENDPOINT", c.Endpoint)
	}
	return u, nil
}

// isHubHost reports whether u is on the endpoint's host (port included):
// the only host that may see the token.
func (c *Client) isHubHost(u *url.URL) bool {
	ep, err := c.endpointURL()
	return err == nil && strings.EqualFold(u.Host, ep.Host) && u.Scheme == ep.Scheme
}

// newRequest builds a request that carries the token only to the Hub host.
func (c *Client) newRequest(ctx context.Context, method, rawURL string) (*retryablehttp.Request, error) {
	if c.Offline {
		return nil, fmt.Errorf("%w: refusing %s %s (offline mode: --offline or HF_HUB_OFFLINE)", ErrOffline, method, rawURL)
	}
	req, err := retryablehttp.NewRequestWithContext(withAttemptLog(ctx, method, rawURL), method, rawURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "nvmai-download/1")
	req.Header.Set("Accept-Encoding", "identity")
	if c.Token != "" && c.isHubHost(req.URL) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

// retryClient returns a retrying client. followRedirects=false gives the
// caller the 3xx itself (to read X-Linked-* headers and keep Location).
func (c *Client) retryClient(followRedirects bool) *retryablehttp.Client {
	hc := &http.Client{Transport: c.roundTripper()}
	if followRedirects {
		hc.CheckRedirect = c.checkRedirect
	} else {
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	rc := retryablehttp.NewClient()
	rc.HTTPClient = hc
	rc.Logger = nil // the default logger prints [DEBUG] lines over the progress bar
	rc.RetryMax = c.MaxRetries
	rc.RetryWaitMin, rc.RetryWaitMax = c.RetryWaitMin, c.RetryWaitMax
	rc.Backoff = c.backoff
	rc.CheckRetry = c.checkRetryAndReport
	rc.ErrorHandler = countAttempts
	return rc
}

// checkRedirect drops the token on any redirect off the Hub host. Go keeps
// Authorization for subdomains (cdn-lfs.huggingface.co) and would leak it.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return fmt.Errorf("stopped after %d redirects", len(via))
	}
	if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("refusing redirect from https to %s", req.URL.Redacted())
	}
	if !c.isHubHost(req.URL) {
		req.Header.Del("Authorization")
	}
	return nil
}

// checkRetry is retryablehttp's default policy, plus 408, minus protocol
// errors (an HTTP/2-only server will not change its mind).
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return false, err
	}
	if ctx.Err() == nil && err == nil && resp != nil && resp.StatusCode == http.StatusRequestTimeout {
		return true, nil
	}
	return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
}

// backoff is full-jitter exponential backoff between min and max; a
// Retry-After on 429/503 is honoured but capped at RetryAfterMax
// (retryablehttp's DefaultBackoff does not cap it, its issue #247).
func (c *Client) backoff(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return clampDuration(d, 0, c.RetryAfterMax)
		}
	}
	ceiling := lo << min(attempt, 30)
	if ceiling <= 0 || ceiling > hi {
		ceiling = hi
	}
	if ceiling <= lo {
		return lo
	}
	return lo + rand.N(ceiling-lo+1)
}

func clampDuration(d, lo, hi time.Duration) time.Duration {
	return max(lo, min(d, hi))
}

// parseRetryAfter reads delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > int64(24*time.Hour/time.Second) {
			secs = int64(24 * time.Hour / time.Second)
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
