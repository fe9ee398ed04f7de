package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/jsonobj"
)

// Error is an error with its HTTP status, error type and code (OpenAI's
// names, which every protocol's error writer maps onto its own).
type Error struct {
	Status  int
	Type    string
	Param   string
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// BadRequest is a 400 invalid_request_error naming param.
func BadRequest(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

// Classify maps an error (a core *server.Error, a decoding failure, a
// refusal of the host) to its HTTP status and error type, so that every
// protocol answers the same failure with the same status.
func Classify(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var se *server.Error
	if errors.As(err, &se) {
		switch se.Kind {
		case server.KindInvalid:
			return &Error{Status: 400, Type: "invalid_request_error", Param: se.Param, Message: se.Msg}
		case server.KindContextOverflow:
			return &Error{Status: 400, Type: "invalid_request_error", Param: se.Param, Code: "context_length_exceeded", Message: se.Msg}
		case server.KindQueueFull:
			return &Error{Status: 429, Type: "rate_limit_error", Code: "queue_full", Message: se.Msg}
		case server.KindUnavailable:
			return &Error{Status: 503, Type: "server_error", Code: "loading", Message: se.Msg}
		case server.KindNotFound:
			return &Error{Status: 404, Type: "invalid_request_error", Param: se.Param, Code: "model_not_found", Message: se.Msg}
		}
		return &Error{Status: 500, Type: "server_error", Message: se.Msg}
	}
	return &Error{Status: 500, Type: "server_error", Message: err.Error()}
}

// ErrorBody is the host's error envelope, {"error":{message, type, param,
// code}}: OpenAI's, which the OpenAI and Responses adapters answer with.
type ErrorBody struct {
	Error ErrorObject `json:"error"`
}

// ErrorObject is the envelope's error.
type ErrorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Envelope is err in the host's envelope.
func Envelope(err error) ErrorBody {
	e := Classify(err)
	b := ErrorBody{Error: ErrorObject{Message: e.Message, Type: e.Type}}
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	if e.Code != "" {
		b.Error.Code = &e.Code
	}
	return b
}

// WriteError writes err in the host's envelope with its status, and a
// Retry-After where a retry may succeed.
func WriteError(w http.ResponseWriter, err error) {
	e := Classify(err)
	SetRetryAfter(w, e.Status)
	WriteJSON(w, e.Status, Envelope(e)) // an envelope of strings always encodes
}

// SetRetryAfter tells a client when to retry a refusal with status: soon
// when the queue is full (429, or Anthropic's 529), later while a model
// loads or the server stops (503).
func SetRetryAfter(w http.ResponseWriter, status int) {
	switch status {
	case http.StatusTooManyRequests, 529:
		w.Header().Set("Retry-After", "1")
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "5")
	}
}

// WriteJSON writes v as the JSON body with status, without HTML escaping
// (prompts and code hold < > &). When v cannot be encoded it writes
// nothing and returns why, so that the route's error writer answers.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
	body, err := jsonobj.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding the response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
	return nil
}

// DecodeJSON reads one JSON value from the request body into v, naming
// what is wrong (a 400 or 413 *Error), then lifts the connection's read
// deadline: net/http cancels a request's context when a read times out,
// and its background read (which watches for the client going away)
// would hit the ReadTimeout in the middle of a long generation.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if err := Decode(r.Body, v); err != nil {
		return err
	}
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	return nil
}

// Decode decodes one JSON value from body into v, naming what is wrong:
// the byte offset of a syntax error, the field of a type error.
func Decode(body io.Reader, v any) error {
	// Decoding from the stream holds one copy of the body, not two.
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if tooLarge(err) != nil {
			return tooLarge(err)
		}
		return BadRequest("", "the request body holds more than one JSON value")
	}
	return nil
}

func tooLarge(err error) error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
			Message: fmt.Sprintf("the request body is larger than %d bytes (--max-body)", mb.Limit)}
	}
	return nil
}

func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if e := tooLarge(err); e != nil {
		return e
	}
	switch {
	case errors.Is(err, io.EOF):
		return BadRequest("", "the request body is empty; send a JSON object")
	case errors.As(err, &se):
		return BadRequest("", "malformed JSON at byte offset %d: %v", se.Offset, se)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return BadRequest("", "the request body must be a JSON object, not %s", te.Value)
		}
		return BadRequest(field, "field %q: expected %s, got JSON %s", field, jsonKind(te.Type.String()), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return BadRequest("", "malformed JSON: the body ends in the middle of a value")
	}
	return BadRequest("", "malformed JSON: %v", err)
}

func jsonKind(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case strings.Contains(goType, "bool"):
		return "a boolean"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.HasPrefix(goType, "[]") || strings.HasPrefix(goType, "*[]"):
		return "an array"
	}
	return "an object"
}
