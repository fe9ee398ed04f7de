package fakehub

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// FaultKind is a way to misbehave.
type FaultKind int

const (
	// Status answers Fault.Status (with Fault.RetryAfter if set).
	Status FaultKind = iota + 1
	// IgnoreRange answers 200 with the whole file.
	IgnoreRange
	// WrongContentRange answers 206 with the right bytes but a
	// Content-Range one byte off.
	WrongContentRange
	// ShortBody sends half the range with a matching Content-Length.
	ShortBody
	// LongBody sends the range plus After extra bytes, with a matching
	// Content-Length.
	LongBody
	// UnsizedShort sends half the range with no Content-Length (chunked),
	// ending cleanly: only counting bytes can tell.
	UnsizedShort
	// UnsizedLong sends the range plus After bytes with no Content-Length.
	UnsizedLong
	// Truncate declares the full Content-Length, sends After bytes and
	// closes the connection.
	Truncate
	// Reset sends headers and After bytes, then resets the TCP connection.
	Reset
	// Stall sends After bytes, then nothing until the client gives up.
	Stall
	// Trickle sends one byte every TrickleEvery (default 2 ms): an idle
	// timeout never fires, only a stall floor catches it.
	Trickle
)

// AnyOffset matches a request whatever its Range.
const AnyOffset = -1

// Fault is an injected misbehaviour. The zero Server and Method match
// every server and method; File "" matches every file.
type Fault struct {
	Server string // "hub", "cdn" or "" for both
	Method string
	File   string // repository path
	// Offset is the first byte of the Range to match, or AnyOffset.
	Offset int64
	// Times is how many matching requests get the fault; 0 means all.
	Times int

	Kind         FaultKind
	Status       int
	RetryAfter   string
	After        int64
	TrickleEvery time.Duration
}

type injection struct {
	Fault
	used int
}

// Inject adds a fault. Earlier faults are tried first.
func (h *Hub) Inject(f Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, &injection{Fault: f})
}

// takeFault returns the first fault matching the request and counts it.
// Body faults only match requests that have a body to spoil.
func (h *Hub) takeFault(r *http.Request, server, filePath string, offset int64, withBody bool) *Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, in := range h.faults {
		if (in.Server != "" && in.Server != server) || (in.Method != "" && in.Method != r.Method) ||
			(in.File != "" && in.File != filePath) || (in.Offset != AnyOffset && in.Offset != offset) ||
			(in.Times > 0 && in.used >= in.Times) || (!withBody && in.Kind != Status) {
			continue
		}
		in.used++
		f := in.Fault
		return &f
	}
	return nil
}

// injectedStatus applies a Status fault to a metadata request (body
// faults do not apply there) and reports whether it answered.
func (h *Hub) injectedStatus(w http.ResponseWriter, r *http.Request, server, filePath string) bool {
	f := h.takeFault(r, server, filePath, AnyOffset, false)
	if f == nil {
		return false
	}
	h.answerStatus(w, r, server, filePath, f)
	return true
}

func (h *Hub) answerStatus(w http.ResponseWriter, r *http.Request, server, filePath string, f *Fault) {
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	h.fail(w, r, server, filePath, f.Status, "", http.StatusText(f.Status))
}

// serveBytes serves f with single-range support, applying any fault.
func (h *Hub) serveBytes(w http.ResponseWriter, r *http.Request, server string, f *file) {
	size := int64(len(f.data))
	start, end, ranged, ok := parseRange(r.Header.Get("Range"), size)
	if !ok {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		h.fail(w, r, server, f.path, http.StatusRequestedRangeNotSatisfiable, "", "range not satisfiable")
		return
	}
	offset := int64(AnyOffset)
	if ranged {
		offset = start
	}
	fault := h.takeFault(r, server, f.path, offset, r.Method == http.MethodGet)
	if fault != nil && fault.Kind == Status {
		h.answerStatus(w, r, server, f.path, fault)
		return
	}
	status := http.StatusOK
	hdr := w.Header()
	hdr.Set("Accept-Ranges", "bytes")
	if ranged {
		status = http.StatusPartialContent
		hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, size))
	}
	body := f.data[start : end+1]
	kind := FaultKind(0)
	if fault != nil {
		kind = fault.Kind
	}
	switch kind {
	case IgnoreRange:
		status, body = http.StatusOK, f.data
		hdr.Del("Content-Range")
	case WrongContentRange:
		hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start+1, end+1, size))
	case ShortBody, UnsizedShort:
		body = body[:len(body)/2]
	case LongBody, UnsizedLong:
		body = append(body[:len(body):len(body)], make([]byte, fault.After)...)
	}
	h.record(r, server, f.path, status)
	if r.Method == http.MethodHead {
		hdr.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		return
	}
	switch kind {
	case UnsizedShort, UnsizedLong:
		w.WriteHeader(status)
		w.(http.Flusher).Flush() // headers out without Content-Length: chunked
		w.Write(body)
		return
	case Reset:
		h.reset(w, status, body, fault.After)
		return
	}
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	switch kind {
	case Truncate:
		w.Write(body[:min(fault.After, int64(len(body)))])
		// Returning with fewer bytes than declared makes the server close.
	case Stall:
		w.Write(body[:min(fault.After, int64(len(body)))])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-h.closing:
		}
	case Trickle:
		h.trickle(w, r, body, fault.TrickleEvery)
	default:
		w.Write(body)
	}
}

func (h *Hub) trickle(w http.ResponseWriter, r *http.Request, body []byte, every time.Duration) {
	if every <= 0 {
		every = 2 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for i := range body {
		if _, err := w.Write(body[i : i+1]); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-h.closing:
			return
		case <-t.C:
		}
	}
}

// reset writes a response by hand on the hijacked connection and resets it
// (SO_LINGER 0) after n body bytes.
func (h *Hub) reset(w http.ResponseWriter, status int, body []byte, n int64) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	for k, vs := range w.Header() {
		for _, v := range vs {
			fmt.Fprintf(buf, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(buf, "Content-Length: %d\r\n\r\n", len(body))
	buf.Write(body[:min(n, int64(len(body)))])
	buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}

// parseRange reads a single "bytes=a-b" or "bytes=a-" range. ranged is false
// without a Range header; ok is false for an unsatisfiable one.
func parseRange(header string, size int64) (start, end int64, ranged, ok bool) {
	if header == "" {
		return 0, size - 1, false, true
	}
	spec, found := strings.CutPrefix(header, "bytes=")
	a, b, dash := strings.Cut(spec, "-")
	if !found || !dash || strings.Contains(spec, ",") {
		return 0, 0, true, false
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 || start >= size {
		return 0, 0, true, false
	}
	end = size - 1
	if b != "" {
		e, err := strconv.ParseInt(b, 10, 64)
		if err != nil || e < start {
			return 0, 0, true, false
		}
		end = min(e, size-1)
	}
	return start, end, true, true
}
