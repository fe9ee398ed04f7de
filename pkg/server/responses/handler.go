// Package responses is the OpenAI Responses protocol adapter
// (POST /v1/responses, the only wire API of Codex CLI) over the server
// core: it maps input items, instructions and flat function tools onto a
// core chat request, runs it, and answers with a Response object or its
// event stream (response.created … response.completed). It is stateless
// for clients that send the whole conversation (Codex does, with
// store:false) and keeps the newest responses in memory for clients that
// continue with previous_response_id.
package responses

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/sse"
)

// Path is where the endpoint is mounted.
const Path = "/v1/responses"

// DefaultKeep is how many responses are held for previous_response_id.
const DefaultKeep = 64

// Options configures the endpoint.
type Options struct {
	// Keep is how many of the newest responses are held in memory for
	// previous_response_id (0: DefaultKeep; negative: none).
	Keep int
	// KeepAlive is the most silence on a stream (default 5 s): long
	// prefills and queue waits send SSE comments meanwhile.
	KeepAlive time.Duration
	// Log receives the one line about tools and items a request held that
	// the runtime cannot serve (default: stderr).
	Log io.Writer
}

// Handler serves POST /v1/responses over a server core.
type Handler struct {
	s     *server.Server
	opt   Options
	store *store
	logMu sync.Mutex
}

// New returns the endpoint over s.
func New(s *server.Server, opt Options) *Handler {
	switch {
	case opt.Keep == 0:
		opt.Keep = DefaultKeep
	case opt.Keep < 0:
		opt.Keep = 0
	}
	if opt.KeepAlive <= 0 {
		opt.KeepAlive = 5 * time.Second
	}
	if opt.Log == nil {
		opt.Log = os.Stderr
	}
	return &Handler{s: s, opt: opt, store: newStore(opt.Keep)}
}

// Mount adds the endpoint to the host, sharing its listener,
// authentication, body limit, recovery and request log; errors are
// written in OpenAI's envelope (the host's).
func (h *Handler) Mount(host *httpapi.Host) {
	host.Mount(Path, httpapi.Route{Method: http.MethodPost, Serve: h.serve, WriteError: httpapi.WriteError})
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, log *server.RequestLog) error {
	var req request
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		return err
	}
	log.Stream = req.Stream
	c, err := h.convert(&req)
	if err != nil {
		return err
	}
	if len(c.skipped) > 0 {
		h.logf("nvmai-run serve: %s: skipped what this runtime cannot serve: %s", Path, strings.Join(c.skipped, ", "))
	}
	job, err := h.s.PrepareChat(c.chat)
	if err != nil {
		return err
	}
	// With --models-dir, a stream starts only once its model is loaded, so
	// that a load failure is answered with its status, not inside a 200.
	if req.Stream && job.NeedsLoad() {
		if err := job.Wait(r.Context()); err != nil {
			return err
		}
	}
	x := &exchange{h: h, req: &req, conv: c, job: job, log: log}
	x.base = x.response()
	if req.Stream {
		return x.stream(w, r)
	}
	return x.once(w, r)
}

func (h *Handler) convert(req *request) (*converted, error) {
	var prior []chattemplate.Message
	if id := req.PreviousResponseID; id != nil && *id != "" {
		var ok bool
		if prior, ok = h.store.get(*id); !ok {
			return nil, &httpapi.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "previous_response_id", Code: "previous_response_not_found",
				Message: fmt.Sprintf("Previous response with id '%s' not found: this server holds only its newest %d responses, in memory, and none sent with store:false; send the whole conversation as input instead", truncate(*id), h.opt.Keep)}
		}
	}
	return convert(req, prior, h.s.InfoFor(req.Model).Sampling)
}

func truncate(s string) string {
	if len(s) > maxIDLength {
		return s[:maxIDLength] + "…"
	}
	return s
}

func (h *Handler) logf(format string, args ...any) {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	fmt.Fprintf(h.opt.Log, format+"\n", args...)
}

// exchange is one request being answered.
type exchange struct {
	h    *Handler
	req  *request
	conv *converted
	job  *server.Job
	log  *server.RequestLog
	base responseJSON
}

// response is the Response object before any output.
func (x *exchange) response() responseJSON {
	r := x.req
	resp := responseJSON{
		ID: x.h.s.NewID("resp_"), Object: "response", CreatedAt: x.h.s.Now().Unix(), Status: "in_progress",
		Instructions: r.Instructions, MaxOutputTokens: r.MaxOutputTokens, Model: x.job.Model(), Output: []outputItem{},
		ParallelToolCalls: x.conv.chat.ParallelToolCalls, PreviousResponseID: r.PreviousResponseID,
		Reasoning: reasoningConfig{Effort: x.conv.effort, Summary: x.conv.summary}, Store: r.Store == nil || *r.Store,
		Temperature: r.Temperature, TopP: r.TopP, ToolChoice: r.ToolChoice, Tools: r.Tools, Truncation: "disabled", Metadata: map[string]string{},
		Text: textConfig{Format: json.RawMessage(`{"type":"text"}`)},
	}
	if r.Text != nil && len(r.Text.Format) > 0 && string(r.Text.Format) != "null" {
		resp.Text.Format = r.Text.Format
	}
	if len(resp.ToolChoice) == 0 {
		resp.ToolChoice = json.RawMessage(`"auto"`)
	}
	if resp.Tools == nil {
		resp.Tools = []json.RawMessage{}
	}
	return resp
}

func (x *exchange) newAssembler(emit func(eventJSON)) *assembler {
	return &assembler{newID: x.h.s.NewID, emit: emit}
}

// finished fills the Response from the result and keeps the conversation.
func (x *exchange) finished(a *assembler, res *server.ChatResult) responseJSON {
	a.close()
	resp := x.base
	resp.Output = a.items
	resp.Status, resp.IncompleteDetails = status(res.Finish)
	resp.Usage = usage(res.Usage, a.reasoningSteps)
	x.log.Finished(x.job, res.Usage, res.Outcome, res.Finish)
	if resp.Store {
		x.h.store.put(resp.ID, append(x.conv.history, assistantTurn(res)))
	}
	return resp
}

// assistantTurn is the reply as the next request's history holds it.
func assistantTurn(res *server.ChatResult) chattemplate.Message {
	m := chattemplate.Message{Role: "assistant", Content: res.Content}
	if res.Reasoning != "" {
		r := res.Reasoning
		m.ReasoningContent = &r
	}
	if res.Content == "" && len(res.ToolCalls) > 0 {
		m.ContentNull = true
	}
	for _, tc := range res.ToolCalls {
		args := json.RawMessage(tc.Arguments)
		if !json.Valid(args) {
			args = json.RawMessage("{}")
		}
		m.ToolCalls = append(m.ToolCalls, chattemplate.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: args})
	}
	return m
}

func (x *exchange) once(w http.ResponseWriter, r *http.Request) error {
	a := x.newAssembler(nil)
	res, err := x.job.RunChat(r.Context(), a.event)
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, x.finished(a, res))
}

func (x *exchange) stream(w http.ResponseWriter, r *http.Request) error {
	st := &stream{Stream: sse.Start(w, r, x.h.opt.KeepAlive, sse.Comment)}
	defer st.Close()
	start := x.base
	st.event(eventJSON{Type: "response.created", Response: &start})
	st.event(eventJSON{Type: "response.in_progress", Response: &start})
	a := x.newAssembler(st.event)
	res, err := x.job.RunChat(r.Context(), a.event)
	st.StopKeepAlive()
	if err != nil {
		if r.Context().Err() != nil {
			return err // the client is gone
		}
		x.fail(st, a, err)
		return err
	}
	resp := x.finished(a, res)
	typ := "response.completed"
	if resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	st.event(eventJSON{Type: typ, Response: &resp})
	return nil
}

// fail ends a stream that has started: an error event, then
// response.failed with what was generated so far.
func (x *exchange) fail(st *stream, a *assembler, err error) {
	a.close()
	e := httpapi.Classify(err)
	code := e.Code
	if code == "" {
		code = e.Type
	}
	ev := eventJSON{Type: "error", Code: &code, Message: e.Message}
	if e.Param != "" {
		ev.Param = &e.Param
	}
	st.event(ev)
	resp := x.base
	resp.Status, resp.Output = "failed", a.items
	resp.Error = &errorJSON{Code: code, Message: e.Message}
	st.event(eventJSON{Type: "response.failed", Response: &resp})
}

// stream writes SSE events with their sequence numbers; a keep-alive
// comment is written whenever the stream has been silent for a while,
// since clients and proxies time out on silence. A client that stops
// reading is cut off (see package sse).
type stream struct {
	*sse.Stream
	seq int // guarded by the stream: numbered in the order written
}

func (st *stream) event(ev eventJSON) {
	st.Locked(func(write func(string)) {
		ev.SequenceNumber = st.seq
		st.seq++
		if f, err := sse.EventFrame(ev.Type, ev); err == nil {
			write(f)
		}
	})
}
