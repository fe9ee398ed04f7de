package openai

import (
	"cmp"
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

type completionJSON = objectJSON[textChoiceJSON]

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
	if creq.Format, err = responseFormat(req.ResponseFormat, req.FormatLimits); err != nil {
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
		log.Finished(job, res.Usage, res.Outcome, res.Finish)
		return httpapi.WriteJSON(w, http.StatusOK, base.answer(textChoiceJSON{Text: res.Text, FinishReason: &res.Finish}, res.Usage, res.Outcome))
	}
	st := sse.Start(w, r, a.opt.KeepAlive, sse.Comment)
	defer st.Close()
	c := chunks[textChoiceJSON]{st: st, base: base}
	res, err := job.RunCompletion(r.Context(), func(t string) { c.send(textChoiceJSON{Text: t}) })
	if err != nil {
		return c.fail(err)
	}
	log.Finished(job, res.Usage, res.Outcome, res.Finish)
	return c.end(textChoiceJSON{FinishReason: &res.Finish}, res.Usage, res.Outcome, req.includeUsage())
}
