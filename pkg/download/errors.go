package download

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nvmai/nvmai/pkg/units"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
)

// ProtocolError means a server answered with something other than HTTP/1.1
// (an HTTP/2-only server or proxy). It is never retried: nvmai does not fall
// back to HTTP/2, whose long-lived streams CDNs cancel mid-file
// (hf-download.md §2.5 rows 8-9).
type ProtocolError struct {
	Host   string
	Detail string
	Err    error
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("%s does not speak HTTP/1.1 (%s); nvmai downloads only over HTTP/1.1: "+
		"use an endpoint or proxy that serves HTTP/1.1 (check HF_ENDPOINT and HTTPS_PROXY)", e.Host, e.Detail)
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// http1Only checks every response's protocol, so no code path can silently
// use HTTP/2 even if the transport were misconfigured.
type http1Only struct{ next http.RoundTripper }

func (t http1Only) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, explainTransportError(req.URL.Host, err)
	}
	if resp.ProtoMajor != 1 {
		resp.Body.Close()
		return nil, &ProtocolError{Host: req.URL.Host, Detail: "it answered " + resp.Proto}
	}
	return resp, nil
}

// explainTransportError names the ways an HTTP/2-only server shows up on an
// HTTP/1.1 connection: binary frames read as a status line, or a TLS
// handshake that finds no common ALPN protocol.
func explainTransportError(host string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "malformed HTTP response") && strings.Contains(msg, `\x00\x00`):
		return &ProtocolError{Host: host, Detail: "it sent HTTP/2 frames to an HTTP/1.1 request", Err: err}
	case strings.Contains(msg, "no application protocol"), strings.Contains(msg, "unsupported application protocols"):
		return &ProtocolError{Host: host, Detail: "its TLS handshake offers only HTTP/2", Err: err}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		strings.Contains(msg, "server closed idle connection"):
		return &connClosedError{host: host, err: err}
	}
	return err
}

// connClosedError stays retryable (servers restart) but says what an
// HTTP/2-only server looks like from here, so the final error is actionable.
type connClosedError struct {
	host string
	err  error
}

func (e *connClosedError) Error() string {
	return fmt.Sprintf("%s closed the connection without an HTTP/1.1 response (%v); if it persists, "+
		"the server or a proxy may speak only HTTP/2, which nvmai does not use", e.host, e.err)
}

func (e *connClosedError) Unwrap() error { return e.err }

// Sentinels for errors.Is on a *HubError.
var (
	ErrUnauthorized = errors.New("not authorized")
	ErrGated        = errors.New("gated repository")
	ErrForbidden    = errors.New("forbidden")
	ErrNotFound     = errors.New("not found")
)

// HubError is a 401, 403 or 404 from the Hub, with what to do about it.
type HubError struct {
	Status   int
	Sentinel error  // one of ErrUnauthorized, ErrGated, ErrForbidden, ErrNotFound
	Code     string // X-Error-Code, e.g. GatedRepo, RepoNotFound, RevisionNotFound, EntryNotFound
	Message  string // the server's own words
	Repo     string
	Revision string
	Path     string
	Endpoint string
	HadToken bool
}

func (e *HubError) Is(target error) bool { return target == e.Sentinel }

func (e *HubError) Error() string {
	what := e.Repo
	if e.Path != "" {
		what = fmt.Sprintf("%s: %s", e.Repo, e.Path)
	}
	if e.Revision != "" {
		what += "@" + e.Revision
	}
	page := e.Endpoint + "/" + e.Repo
	var advice string
	switch {
	case e.Sentinel == ErrGated && !e.HadToken:
		advice = fmt.Sprintf("the repository is gated: accept its licence on %s, then set HF_TOKEN "+
			"(or run `hf auth login`) with a token of that account", page)
	case e.Sentinel == ErrGated:
		advice = fmt.Sprintf("the repository is gated and this token's account has not been granted access: "+
			"accept the licence on %s (approval can take a while) and retry", page)
	case e.Sentinel == ErrUnauthorized && e.HadToken && strings.Contains(e.Message, "Invalid credentials"):
		advice = "the Hub rejected the token: create a new read token at " + e.Endpoint +
			"/settings/tokens and set HF_TOKEN (or run `hf auth login`)"
	case e.Sentinel == ErrUnauthorized && !e.HadToken:
		advice = "the repository is private, gated or does not exist: check the name, " +
			"or set HF_TOKEN (or run `hf auth login`) with a token that can read it"
	case e.Sentinel == ErrUnauthorized:
		advice = "the repository is private, gated or does not exist, or the token cannot read it: " +
			"check the name and the token's permissions"
	case e.Sentinel == ErrForbidden:
		advice = "the token lacks permission: make sure it has read access to " + e.Repo
	case e.Code == "RevisionNotFound":
		advice = fmt.Sprintf("revision %q does not exist: check the branch, tag or commit on %s", e.Revision, page)
	case e.Code == "EntryNotFound":
		advice = "the file does not exist at this revision: check the revision"
	default:
		advice = fmt.Sprintf("check the repository name (org/name) and revision on %s", page)
	}
	msg := fmt.Sprintf("%s: %s (HTTP %d", what, advice, e.Status)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg + ")"
}

// hubErrorFrom maps a 401/403/404 response to a *HubError, and returns nil for
// other statuses. It reads at most 4 KiB of the body for the message.
func (c *Client) hubErrorFrom(resp *http.Response, repo, revision, path string) error {
	var sentinel error
	code := resp.Header.Get("X-Error-Code")
	switch {
	case code == "GatedRepo":
		sentinel = ErrGated
	case resp.StatusCode == http.StatusUnauthorized:
		sentinel = ErrUnauthorized
	case resp.StatusCode == http.StatusForbidden:
		sentinel = ErrForbidden
	case resp.StatusCode == http.StatusNotFound:
		sentinel = ErrNotFound
	default:
		return nil
	}
	return &HubError{
		Status: resp.StatusCode, Sentinel: sentinel, Code: code, Message: serverMessage(resp),
		Repo: repo, Revision: revision, Path: path, Endpoint: c.Endpoint, HadToken: c.Token != "",
	}
}

func serverMessage(resp *http.Response) string {
	if m := resp.Header.Get("X-Error-Message"); m != "" {
		return m
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil && body.Error != "" {
		return body.Error
	}
	return strings.TrimSpace(string(b))
}

// statusError describes an answer we cannot use. retryablehttp hands back
// the last 429/5xx response without an error once its retries are spent.
func (c *Client) statusError(resp *http.Response) error {
	msg := fmt.Sprintf("unexpected HTTP %s from %s", resp.Status, resp.Request.URL.Host)
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		msg += fmt.Sprintf(" after %d retries: the server is overloaded or down, try again later", c.MaxRetries)
	}
	if m := serverMessage(resp); m != "" {
		msg += " (" + m + ")"
	}
	return errors.New(msg)
}

// bareError drops the *url.Error wrapper, whose text repeats the URL that
// our own message already names.
func bareError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// VerifyError means downloaded bytes do not match what the Hub advertised.
// The temporary file has been deleted.
type VerifyError struct {
	Path string // path in the repository
	What string // "sha256", "git blob sha1" or "size"
	Want string
	Got  string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("%s: %s mismatch: the Hub advertises %s, the downloaded bytes have %s; "+
		"the partial file was deleted, retry the download (if it repeats, report it to the repository owner)",
		e.Path, e.What, e.Want, e.Got)
}

// DiskSpaceError means the target filesystem lacks room for the download
// plus what the caller reserved.
type DiskSpaceError struct {
	Path string
	Need uint64
	Free uint64
	// Elsewhere is the advice for putting the data on another disk; empty
	// means the cache's (HF_HOME or HF_HUB_CACHE).
	Elsewhere string
}

func (e *DiskSpaceError) Error() string {
	elsewhere := e.Elsewhere
	if elsewhere == "" {
		elsewhere = "point HF_HOME (or HF_HUB_CACHE) at a larger disk"
	}
	return fmt.Sprintf("not enough disk space on %s: need %s, %s free; free up %s or %s",
		e.Path, humanBytes(e.Need), humanBytes(e.Free), humanBytes(e.Need-e.Free), elsewhere)
}

// humanBytes is units.Bytes for the unsigned counts this package keeps.
func humanBytes(n uint64) string { return units.Bytes(int64(min(n, 1<<63-1))) }
