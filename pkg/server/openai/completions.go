package openai

import (
	"cmp"
	"context"
	"errors"
	"net/http"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/sse"
)

// defaultCompletionTokens is OpenAI's max_tokens default for /v1/completions.
const defaultCompletionTokens = 16

type textChoiceJSON struct {
	Text         string    `json:"text"`
	Index        int       `json:"index"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type completionJSON struct {
	ID      string           `json:"id"`
	Object  string           `json:"object"`
	Created int64            `json:"created"`
	Model   string           `json:"model"`
	Choices []textChoiceJSON `json:"choices"`
	Usage   *usageJSON       `json:"usage,omitempty"`
	Timings *timingsJSON     `json:"timings,omitempty"`
}

func (a *Adapter) completions(w http.ResponseWriter, r *http.Request, log *server.RequestLog) error {
	var req completionRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		return err
	}
	creq := &server.CompletionRequest{Endpoint: "/v1/completions", Model: req.Model}
	var err error
	if creq.Prompt, err = decodePrompt(req.Prompt); err != nil {
		return err
	}
	if err := req.unsupported(); err != nil {
		return err
	}
	if creq.Sampling, err = req.sampling(a.defaults(req.Model)); err != nil {
		return err
	}
	if creq.Stop, err = decodeStop(req.Stop); err != nil {
		return err
	}
	if creq.Format, err = responseFormat(req.ResponseFormat); err != nil {
		return err
	}
	if creq.MaxTokens, err = maxTokens(req.MaxTokens, nil); err != nil {
		return err
	}
	if creq.MaxTokens == 0 {
		creq.MaxTokens = cmp.Or(a.s.DefaultMaxTokens(), defaultCompletionTokens) // serve --max-tokens wins over OpenAI's 16
	}
	log.Stream = req.Stream
	job, err := a.s.PrepareCompletion(creq)
	if err != nil {
		return err
	}
	if err := waitForModel(r.Context(), job, req.Stream); err != nil {
		return err
	}
	base := completionJSON{ID: a.s.NewID("cmpl-"), Object: "text_completion", Created: a.s.Now().Unix(), Model: job.Model()}
	if !req.Stream {
		res, err := job.RunCompletion(r.Context(), nil)
		if err != nil {
			return err
		}
		fillLog(log, job, res.Usage, res.Outcome, res.Finish)
		base.Choices = []textChoiceJSON{{Text: res.Text, FinishReason: &res.Finish}}
		base.Usage, base.Timings = usage(res.Usage), timings(res.Usage, res.Outcome)
		return httpapi.WriteJSON(w, http.StatusOK, base)
	}
	st := sse.Start(w, r, a.opt.KeepAlive, sse.Comment)
	defer st.Close()
	chunk := func(text string, finish *string) {
		c := base
		c.Choices = []textChoiceJSON{{Text: text, FinishReason: finish}}
		st.Data(c)
	}
	res, err := job.RunCompletion(r.Context(), func(t string) { chunk(t, nil) })
	st.StopKeepAlive()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		st.Data(httpapi.Envelope(err))
		st.Write(doneFrame)
		return err
	}
	fillLog(log, job, res.Usage, res.Outcome, res.Finish)
	chunk("", &res.Finish)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		c := base
		c.Choices, c.Usage, c.Timings = []textChoiceJSON{}, usage(res.Usage), timings(res.Usage, res.Outcome)
		st.Data(c)
	}
	st.Write(doneFrame)
	return nil
}
