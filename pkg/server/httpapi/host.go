// Package httpapi is the HTTP host of the server: one listener and one
// handler that routes, checks the Host and Origin (guard.go),
// authenticates, answers CORS, checks method, content type and body size,
// recovers from panics, cuts requests off at shutdown or when a stream's
// client stops reading, limits connections (conns.go) and logs one line
// per request. It knows no protocol: each protocol adapter (openai,
// anthropic, responses) mounts its routes on a Host with its own error
// writer, and decodes and writes JSON with the helpers here (json.go).
package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/sse"
)

// Options configures the host.
type Options struct {
	APIKey     string // required as Bearer or x-api-key when set
	CORSOrigin string // Access-Control-Allow-Origin; "" = no CORS
	MaxBody    int64  // request body cap in bytes (default 4 MiB)
	// StreamWriteTimeout is how long a stream's client may accept no
	// bytes before the stream is cut off (default 20 s).
	StreamWriteTimeout time.Duration
	// ListenHost is the --host address; a Host header naming it is
	// accepted besides the loopback names and AllowedHosts.
	ListenHost string
	// AllowedHosts are further names (or name:port) the Host header may
	// carry. Without an APIKey the Host header is always checked (DNS
	// rebinding); with one, only when AllowedHosts is not empty.
	AllowedHosts []string
}

// DefaultMaxBody is the request body cap.
const DefaultMaxBody = 4 << 20

// Host serves the routes the protocol adapters mount on it, /health and
// /metrics.
type Host struct {
	s       *server.Server
	opt     Options
	routes  map[string]Route
	keyHash [sha256.Size]byte
	counts  requestMetrics // what /metrics counts of the logged requests

	mu       sync.Mutex
	inflight map[*http.Request]context.CancelCauseFunc
	stopping bool
}

// Route is an endpoint a protocol adapter mounts: every route shares the
// listener and the same authentication, CORS, body limit, panic recovery
// and request log.
type Route struct {
	Method string
	// Serve handles the request; an error it returns before writing
	// anything is written by WriteError.
	Serve func(w http.ResponseWriter, r *http.Request, log *server.RequestLog) error
	// WriteError writes err in the protocol's own envelope (nil: the
	// host's, see WriteError). It also receives the host's refusals
	// (authentication, method, content type, body size, panics) as
	// *Error; Classify maps any error to one.
	WriteError func(w http.ResponseWriter, err error)
	// Open routes need no API key.
	Open bool
}

// New returns the host over s, with /health and /metrics mounted.
func New(s *server.Server, opt Options) *Host {
	if opt.MaxBody <= 0 {
		opt.MaxBody = DefaultMaxBody
	}
	if opt.StreamWriteTimeout <= 0 {
		opt.StreamWriteTimeout = sse.DefaultWriteTimeout
	}
	h := &Host{s: s, opt: opt, keyHash: sha256.Sum256([]byte(opt.APIKey)), inflight: map[*http.Request]context.CancelCauseFunc{}}
	h.routes = map[string]Route{
		"/health": {Method: http.MethodGet, Serve: h.health, Open: true},
		// Behind the API key like the protocol routes: the counters tell
		// how the server is used.
		MetricsPath: {Method: http.MethodGet, Serve: h.metrics},
		// The live panel's numbers (live.go), behind the key as /metrics.
		LivePath:     {Method: http.MethodGet, Serve: h.live},
		LiveJSONPath: {Method: http.MethodGet, Serve: h.live},
	}
	return h
}

// Mount adds a route at path (replacing any with that path).
func (h *Host) Mount(path string, rt Route) { h.routes[path] = rt }

// ServeHTTP checks the Host and Origin, routes, authenticates, checks
// method, content type and body size, recovers from panics, and logs one
// line per request.
func (h *Host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.s.Now()
	rec := &statusRecorder{ResponseWriter: w, ctx: r.Context()}
	log := &server.RequestLog{Time: start, Endpoint: r.Method + " " + r.URL.Path}
	// A stream on this keep-alive connection may have left its write
	// deadline behind (the server has no WriteTimeout to reset it).
	http.NewResponseController(w).SetWriteDeadline(time.Time{})
	r, cancel := sse.Prepare(r, sse.Settings{WriteTimeout: h.opt.StreamWriteTimeout})
	defer cancel(nil)
	if !h.track(r, cancel) {
		rec.Header().Set("Connection", "close")
		h.writeErrorFor(r.URL.Path)(rec, &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down", Message: "the server is shutting down"})
		return
	}
	defer h.untrack(r)
	body := &bodyReader{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
		// While the body arrives, a full server may close this connection
		// for a newcomer (a client trickling bodies cannot lock others out).
		ctx := r.Context()
		readingBody(ctx, true)
		body.done = func() { readingBody(ctx, false) }
		defer body.done()
	} else {
		body.eof = true
	}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			log.Error = fmt.Sprintf("panic: %v\n%s", p, debug.Stack())
			if !rec.wrote {
				h.writeErrorFor(r.URL.Path)(rec, &Error{Status: http.StatusInternalServerError, Type: "server_error", Message: "internal error (the server logged it)"})
			}
		}
		log.Status = rec.status
		log.TotalSeconds = h.s.Now().Sub(start).Seconds()
		if logged(r.URL.Path, log.Status) {
			h.counts.record(h.endpointLabel(r.URL.Path), log)
			h.s.Log(*log)
			h.s.LiveNotify() // /v1/live's totals are these counters
		}
	}()
	err := h.serve(rec, r, log)
	if cut := cutOff(r.Context(), err); cut != nil {
		// Nobody reads an answer (the client left or stopped reading) or
		// the server is stopping: log why, write nothing more.
		log.Error, log.Status = cut.Error(), cut.status
		rec.status, rec.wrote = cut.status, true
		return
	}
	if err != nil {
		log.Error = err.Error()
		if !rec.wrote {
			if !body.eof {
				// Closing beats reading (up to 256 KB, for up to the
				// ReadTimeout) a body nobody will use: net/http answers
				// at once and its drain after the handler fails at once.
				rec.Header().Set("Connection", "close")
				http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
			}
			h.writeErrorFor(r.URL.Path)(rec, err)
		}
	}
}

// StatusClientClosedRequest is logged for a request whose client left
// (or stopped reading its stream) before the answer was complete.
const StatusClientClosedRequest = 499

// errShuttingDown cancels the requests in flight when the server stops.
var errShuttingDown = errors.New("cut off: the server is shutting down")

type cutError struct {
	status int
	cause  error
}

func (e *cutError) Error() string { return e.cause.Error() }

// cutOff reports why a request whose handler returned err was cancelled
// from outside, or nil when it was not. A handler that returned nil
// finished its work; it was cut off only if its stream's client stopped
// reading before the end (a client that closes the connection as soon as
// it has read the end is not).
func cutOff(ctx context.Context, err error) *cutError {
	stall := sse.Stalled(ctx)
	switch {
	case ctx.Err() == nil:
		return nil
	case err == nil && stall == nil:
		return nil
	case err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
		return nil
	}
	cause := context.Cause(ctx)
	if stall != nil {
		cause = stall
	}
	switch {
	case errors.Is(cause, errShuttingDown):
		return &cutError{status: http.StatusServiceUnavailable, cause: cause}
	case errors.Is(cause, sse.ErrStalled):
		return &cutError{status: StatusClientClosedRequest, cause: fmt.Errorf("stream cut off: %w", cause)}
	}
	return &cutError{status: StatusClientClosedRequest, cause: errors.New("the client closed the request (context canceled)")}
}

func (h *Host) track(r *http.Request, cancel context.CancelCauseFunc) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return false
	}
	h.inflight[r] = cancel
	return true
}

func (h *Host) untrack(r *http.Request) {
	h.mu.Lock()
	delete(h.inflight, r)
	h.mu.Unlock()
}

// CutOff cancels every request in flight (generation stops, a stream
// blocked on its client returns at once) and refuses new ones with 503;
// it returns how many were cut off. Call it before http.Server.Shutdown,
// which then finishes quickly.
func (h *Host) CutOff() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopping = true
	for _, cancel := range h.inflight {
		cancel(errShuttingDown)
	}
	return len(h.inflight)
}

// bodyReader records whether the request body was read to its end.
type bodyReader struct {
	io.ReadCloser
	eof  bool
	done func() // called at the end of the body
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.eof {
		b.eof = true
		b.done()
	}
	return n, err
}

// writeErrorFor returns the error writer of the route at path.
func (h *Host) writeErrorFor(path string) func(http.ResponseWriter, error) {
	if rt, ok := h.routes[path]; ok && rt.WriteError != nil {
		return rt.WriteError
	}
	return WriteError
}

// paths lists the endpoints, for the 404 message.
func (h *Host) paths() string {
	ps := make([]string, 0, len(h.routes))
	for p := range h.routes {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return strings.Join(ps, ", ")
}

func (h *Host) serve(w http.ResponseWriter, r *http.Request, log *server.RequestLog) error {
	if err := h.guard(r); err != nil {
		return err
	}
	if h.cors(w, r) {
		return nil
	}
	rt, ok := h.routes[r.URL.Path]
	if !ok {
		msg := fmt.Sprintf("no endpoint %s", r.URL.Path)
		if h.authorized(r) { // the list is for clients that may use it
			msg += "; this server has " + h.paths()
		}
		return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found", Message: msg}
	}
	if !rt.Open && !h.authorized(r) {
		return &Error{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "invalid_api_key", Message: "missing or wrong API key: send it as Authorization: Bearer KEY or x-api-key: KEY"}
	}
	if r.Method != rt.Method && !(rt.Method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", rt.Method)
		return &Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed", Message: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, rt.Method, r.Method)}
	}
	if rt.Method == http.MethodPost {
		// A browser sends a cross-site POST without a preflight only with
		// a "simple" content type (or none), so requiring JSON also keeps
		// web pages from driving the server.
		ct := r.Header.Get("Content-Type")
		if ct == "" {
			return &Error{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type", Message: "no Content-Type: send Content-Type: application/json (with curl: -H 'Content-Type: application/json')"}
		}
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return &Error{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type", Message: fmt.Sprintf("Content-Type %q: send application/json (with curl: -H 'Content-Type: application/json')", ct)}
		}
		if r.ContentLength > h.opt.MaxBody {
			return &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("the request body is larger than %d bytes (--max-body): Content-Length is %d", h.opt.MaxBody, r.ContentLength)}
		}
		r.Body = http.MaxBytesReader(w, r.Body, h.opt.MaxBody)
	}
	return rt.Serve(w, r, log)
}

func (h *Host) authorized(r *http.Request) bool {
	if h.opt.APIKey == "" {
		return true
	}
	key := r.Header.Get("x-api-key")
	if a := r.Header.Get("Authorization"); key == "" && len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		key = strings.TrimSpace(a[7:])
	}
	// Digests have one length, so the comparison's time does not tell the
	// key's length either.
	got := sha256.Sum256([]byte(key))
	return subtle.ConstantTimeCompare(got[:], h.keyHash[:]) == 1
}

// cors sets the CORS headers for the configured origin and answers
// preflight requests; it reports whether the request was answered.
func (h *Host) cors(w http.ResponseWriter, r *http.Request) bool {
	o := h.opt.CORSOrigin
	origin := r.Header.Get("Origin")
	if o == "" || origin == "" || (o != "*" && origin != o) {
		return false
	}
	w.Header().Set("Access-Control-Allow-Origin", o)
	w.Header().Set("Vary", "Origin")
	if r.Method == http.MethodOptions {
		w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// statusRecorder remembers the status for the log line, and closes the
// connection after the response while the server is crowded (conns.go).
type statusRecorder struct {
	http.ResponseWriter
	ctx    context.Context // the connection's
	status int
	wrote  bool
}

func (s *statusRecorder) first(code int) {
	s.status, s.wrote = code, true
	if s.ctx != nil && crowded(s.ctx) {
		s.Header().Set("Connection", "close")
	}
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.first(code)
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if !s.wrote {
		s.first(http.StatusOK)
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusRecorder) Flush() { s.FlushError() }

// FlushError lets a stream see a failed write (http.ResponseController
// prefers it to Flush).
func (s *statusRecorder) FlushError() error {
	return http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (h *Host) health(w http.ResponseWriter, r *http.Request, _ *server.RequestLog) error {
	if err := h.s.Health(); err != nil {
		return err
	}
	if !h.authorized(r) {
		// /health is open so that load balancers need no key; the rest is
		// for clients with one.
		return WriteJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	}
	// The goroutine count lets a load test check that nothing leaked; the
	// model is the one in memory (null with --models-dir when none is).
	var loaded *string
	if id := h.s.Loaded(); id != "" {
		loaded = &id
	}
	return WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "goroutines": goruntime.NumGoroutine(), "model": loaded})
}
