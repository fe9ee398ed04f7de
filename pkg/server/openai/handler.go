// Package openai is the OpenAI-compatible protocol adapter over the server
// core: it decodes /v1/chat/completions, /v1/completions and
// /apply-template requests, maps them onto pkg/server's requests, and
// encodes responses and SSE streams in OpenAI's shapes (with
// reasoning_content for reasoning), errors in OpenAI's envelope (the
// host's, httpapi.WriteError). It mounts on the httpapi host, which owns
// authentication, CORS, the body cap, panic recovery and the request log.
package openai

import (
	"net/http"
	"time"

	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
)

// Options configures the adapter.
type Options struct {
	KeepAlive time.Duration // most silence on a stream (default 5 s)
}

// Adapter serves the OpenAI endpoints over a core server.
type Adapter struct {
	s   *server.Server
	opt Options
}

// New returns the adapter over s.
func New(s *server.Server, opt Options) *Adapter {
	if opt.KeepAlive <= 0 {
		opt.KeepAlive = 5 * time.Second
	}
	return &Adapter{s: s, opt: opt}
}

// Mount adds GET /v1/models, POST /v1/chat/completions, /v1/completions
// and /apply-template to h.
func (a *Adapter) Mount(h *httpapi.Host) {
	for path, rt := range map[string]httpapi.Route{
		"/v1/models":           {Method: http.MethodGet, Serve: a.models},
		"/v1/chat/completions": {Method: http.MethodPost, Serve: a.chat},
		"/v1/completions":      {Method: http.MethodPost, Serve: a.completions},
		"/apply-template":      {Method: http.MethodPost, Serve: a.applyTemplate},
	} {
		rt.WriteError = httpapi.WriteError
		h.Mount(path, rt)
	}
}

func (a *Adapter) models(w http.ResponseWriter, r *http.Request, _ *server.RequestLog) error {
	infos := a.s.Models()
	if len(infos) == 0 {
		return a.s.Health()
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		Context int    `json:"context_length"`
	}
	data := make([]model, len(infos))
	for i, info := range infos {
		data[i] = model{ID: info.ID, Object: "model", Created: a.s.Now().Unix(), OwnedBy: "nvmai", Context: info.Context}
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (a *Adapter) applyTemplate(w http.ResponseWriter, r *http.Request, _ *server.RequestLog) error {
	req, creq, err := a.decodeChat(w, r)
	if err != nil {
		return err
	}
	creq.NoGenerationPrompt = req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt
	prompt, err := a.s.ApplyTemplate(creq)
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
}

// defaults are the sampling defaults of the model the request names.
func (a *Adapter) defaults(model string) sample.Params { return a.s.InfoFor(model).Sampling }
