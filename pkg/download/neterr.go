package download

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
)

// Causes of a *NetworkError, the classes a person can act on.
const (
	CauseDNS     = "DNS"
	CauseRefused = "connection refused"
	CauseTimeout = "timeout"
	CauseTLS     = "TLS"
	CauseReset   = "connection reset"
	CauseOther   = "network error"
)

// NetworkError means a host could not be reached at all (no HTTP answer),
// after the retries the client allows.
type NetworkError struct {
	Host     string
	Hub      bool   // Host is the Hub endpoint (not its CDN)
	Cause    string // one of the Cause* constants
	Attempts int    // requests made, the first included
	Err      error
}

func (e *NetworkError) Error() string {
	who := e.Host
	if e.Hub {
		who = "the Hub at " + e.Host
	}
	tried := "tried once"
	if e.Attempts > 1 {
		tried = fmt.Sprintf("gave up after %d attempts (%d retries)", e.Attempts, e.Attempts-1)
	}
	return fmt.Sprintf("cannot reach %s (%s: %v); %s; %s", who, e.Cause, e.Err, tried, e.advice())
}

func (e *NetworkError) advice() string {
	switch e.Cause {
	case CauseDNS:
		return "check the network connection and the host name (HF_ENDPOINT)"
	case CauseTLS:
		return "check the system certificates, the clock and any proxy (HTTPS_PROXY) that intercepts TLS"
	case CauseRefused:
		return "nothing listens there: check HF_ENDPOINT and HTTPS_PROXY"
	}
	return "check the network connection, HF_ENDPOINT and HTTPS_PROXY"
}

func (e *NetworkError) Unwrap() error { return e.Err }

// triedError carries the number of attempts retryablehttp made.
type triedError struct {
	attempts int
	err      error
}

func (e *triedError) Error() string { return e.err.Error() }
func (e *triedError) Unwrap() error { return e.err }

// countAttempts is the retrying client's ErrorHandler: it passes the last
// answer through, as retryablehttp.PassthroughErrorHandler does, and
// remembers how many attempts were made.
func countAttempts(resp *http.Response, err error, attempts int) (*http.Response, error) {
	if err != nil {
		return resp, &triedError{attempts: attempts, err: err}
	}
	return resp, nil
}

// requestError describes a failed request to rawURL: a *NetworkError when
// the host was not reached, else the error with the request named.
func (c *Client) requestError(method, rawURL string, err error) error {
	var pe *ProtocolError
	if errors.As(err, &pe) || errors.Is(err, context.Canceled) || errors.Is(err, ErrOffline) {
		return fmt.Errorf("%s %s: %w", method, rawURL, bareError(err))
	}
	cause := networkCause(err)
	if cause == "" {
		return fmt.Errorf("%s %s: %w", method, rawURL, bareError(err))
	}
	ne := &NetworkError{Cause: cause, Attempts: 1, Err: innermostNetError(err)}
	if u, perr := url.Parse(rawURL); perr == nil {
		ne.Host, ne.Hub = u.Host, c.isHubHost(u)
	}
	var te *triedError
	if errors.As(err, &te) {
		ne.Attempts = te.attempts
	}
	return ne
}

// networkCause classifies a transport error, "" when it is not one.
func networkCause(err error) string {
	var dnsErr *net.DNSError
	var alert tls.AlertError
	var recordErr tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	var netErr net.Error
	var opErr *net.OpError
	var closed *connClosedError
	switch {
	case errors.As(err, &dnsErr):
		return CauseDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return CauseRefused
	case errors.As(err, &alert), errors.As(err, &recordErr), errors.As(err, &certErr),
		errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidCert):
		return CauseTLS
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return CauseTimeout
	case errors.Is(err, syscall.ECONNRESET), errors.As(err, &closed):
		return CauseReset
	case errors.As(err, &opErr), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return CauseOther
	}
	return ""
}

// innermostNetError drops the wrappers whose text repeats the URL.
func innermostNetError(err error) error {
	var te *triedError
	if errors.As(err, &te) {
		err = te.err
	}
	return bareError(err)
}

// RetryNotice is one request about to be retried.
type RetryNotice struct {
	Method, URL string
	Retry       int // 1 for the first retry
	MaxRetries  int
	Cause       string // what went wrong with the previous attempt
}

func (n RetryNotice) String() string {
	return fmt.Sprintf("retry %d of %d: %s %s failed (%s)", n.Retry, n.MaxRetries, n.Method, n.URL, n.Cause)
}

// attemptKey finds a request's *attemptLog in its context.
type attemptKey struct{}

// attemptLog counts the attempts of one request; each request has its own,
// so clients shared by several goroutines count correctly.
type attemptLog struct {
	method, url string
	failures    int
}

func withAttemptLog(ctx context.Context, method, rawURL string) context.Context {
	return context.WithValue(ctx, attemptKey{}, &attemptLog{method: method, url: rawURL})
}

// checkRetryAndReport is checkRetry that tells OnRetry about every retry
// that will actually happen.
func (c *Client) checkRetryAndReport(ctx context.Context, resp *http.Response, err error) (bool, error) {
	retry, cerr := checkRetry(ctx, resp, err)
	log, _ := ctx.Value(attemptKey{}).(*attemptLog)
	if !retry || log == nil || ctx.Err() != nil {
		return retry, cerr
	}
	log.failures++
	if c.OnRetry != nil && log.failures <= c.MaxRetries {
		c.OnRetry(RetryNotice{Method: log.method, URL: log.url, Retry: log.failures, MaxRetries: c.MaxRetries,
			Cause: attemptCause(resp, err)})
	}
	return retry, cerr
}

func attemptCause(resp *http.Response, err error) string {
	if err != nil {
		if cause := networkCause(err); cause != "" {
			return fmt.Sprintf("%s: %v", cause, bareError(err))
		}
		return bareError(err).Error()
	}
	if resp != nil {
		return "HTTP " + resp.Status
	}
	return "no answer"
}
