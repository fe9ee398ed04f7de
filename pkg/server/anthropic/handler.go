// Package anthropic is the Anthropic Messages protocol adapter over the
// server core: POST /v1/messages (streamed and not) and
// /v1/messages/count_tokens, for Claude Code and the Anthropic SDKs. It
// decodes Anthropic's request into pkg/server's ChatRequest, runs it on the
// one generation loop, and encodes the parsed reasoning, text and tool
// calls as Anthropic content blocks and stream events, errors in
// Anthropic's envelope. It mounts on the httpapi host, so authentication
// (x-api-key or Bearer), CORS, the body cap, panic recovery and the
// request log are shared with the other protocols. docs/anthropic.md is its reference.
package anthropic

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
)

// Options configures the adapter.
type Options struct {
	// KeepAlive is the most silence on a stream before a ping event
	// (default 5 s): long prefills must not look like a dead connection.
	KeepAlive time.Duration
	// SignatureKey is the HMAC key of thinking signatures (default a
	// built-in constant; see signature.go).
	SignatureKey []byte
}

// Adapter serves the Anthropic endpoints over a core server.
type Adapter struct {
	s      *server.Server
	opt    Options
	signer signer
}

// New returns the adapter over s.
func New(s *server.Server, opt Options) *Adapter {
	if opt.KeepAlive <= 0 {
		opt.KeepAlive = 5 * time.Second
	}
	return &Adapter{s: s, opt: opt, signer: newSigner(opt.SignatureKey)}
}

// Mount adds POST /v1/messages and POST /v1/messages/count_tokens to h.
func (a *Adapter) Mount(h *httpapi.Host) {
	h.Mount("/v1/messages", httpapi.Route{Method: http.MethodPost, Serve: a.messages, WriteError: WriteError})
	h.Mount("/v1/messages/count_tokens", httpapi.Route{Method: http.MethodPost, Serve: a.countTokens, WriteError: WriteError})
}

// decode reads and converts a request body.
func (a *Adapter) decode(w http.ResponseWriter, r *http.Request, counting bool) (*messagesRequest, *server.ChatRequest, error) {
	var req messagesRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		return nil, nil, err
	}
	c := &converter{defaults: a.s.InfoFor(req.Model).Sampling, ownThinking: a.signer.own, counting: counting}
	creq, err := c.toChat(&req)
	return &req, creq, err
}

func (a *Adapter) countTokens(w http.ResponseWriter, r *http.Request, _ *server.RequestLog) error {
	_, creq, err := a.decode(w, r, true)
	if err != nil {
		return err
	}
	n, err := a.s.CountChatTokens(creq)
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]int{"input_tokens": n})
}

// errorBody is Anthropic's error envelope.
type errorBody struct {
	Type  string      `json:"type"` // "error"
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// StatusOverloaded is Anthropic's status for an overloaded server.
const StatusOverloaded = 529

// classify maps any error onto Anthropic's status and error type: the core
// refusing for a full queue is 529 overloaded_error (Claude Code retries
// it), the rest follows the status httpapi.Classify gives it.
func classify(err error) (int, errorDetail) {
	var se *server.Error
	if errors.As(err, &se) && se.Kind == server.KindQueueFull {
		return StatusOverloaded, errorDetail{"overloaded_error", se.Msg}
	}
	e := httpapi.Classify(err)
	d := errorDetail{Message: e.Message}
	switch e.Status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType:
		d.Type = "invalid_request_error"
	case http.StatusUnauthorized:
		d.Type = "authentication_error"
	case http.StatusForbidden:
		d.Type = "permission_error"
	case http.StatusNotFound:
		d.Type = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		d.Type = "request_too_large"
	case http.StatusTooManyRequests:
		return StatusOverloaded, errorDetail{"overloaded_error", e.Message}
	case http.StatusServiceUnavailable:
		d.Type = "overloaded_error" // loading: retry later
	default:
		return http.StatusInternalServerError, errorDetail{"api_error", e.Message}
	}
	return e.Status, d
}

// WriteError writes err in Anthropic's envelope with its status.
func WriteError(w http.ResponseWriter, err error) {
	status, d := classify(err)
	httpapi.SetRetryAfter(w, status)
	httpapi.WriteJSON(w, status, errorBody{Type: "error", Error: d}) // an envelope of strings always encodes
}

// toolUseID turns the core's call id (call_…) into Anthropic's form.
func toolUseID(id string) string { return "toolu_" + strings.TrimPrefix(id, "call_") }
