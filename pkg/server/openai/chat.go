package openai

import (
	"context"
	"errors"
	"net/http"

	"github.com/nvmai/nvmai/pkg/chatparse"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/sse"
)

type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usage(u server.Usage) *usageJSON {
	j := &usageJSON{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	j.PromptTokensDetails.CachedTokens = u.CachedTokens
	return j
}

type functionJSON struct {
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

type toolCallJSON struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function functionJSON `json:"function"`
}

type messageJSON struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
}

// deltaJSON is a stream delta: content is omitted when absent, except in
// the first chunk where it is null next to the role.
type deltaJSON struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
}

type roleDeltaJSON struct {
	Role    string  `json:"role"`
	Content *string `json:"content"`
}

type choiceJSON struct {
	Index        int          `json:"index"`
	Message      *messageJSON `json:"message,omitempty"`
	Delta        any          `json:"delta,omitempty"`
	Logprobs     *struct{}    `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
}

// objectJSON is a chat completion or completion object, answer or stream
// chunk alike; C is its choice.
type objectJSON[C any] struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []C          `json:"choices"`
	Usage   *usageJSON   `json:"usage,omitempty"`
	Timings *timingsJSON `json:"timings,omitempty"`
}

type chatJSON = objectJSON[choiceJSON]

// answer is the non-streamed object: its one choice, the usage and the
// timings.
func (x objectJSON[C]) answer(choice C, u server.Usage, o server.Outcome) objectJSON[C] {
	x.Choices = []C{choice}
	x.Usage, x.Timings = usage(u), timings(u, o)
	return x
}

// chunks writes an object's stream: a chunk per choice, then its end.
type chunks[C any] struct {
	st   *sse.Stream
	base objectJSON[C]
}

func (c chunks[C]) send(choice C) {
	x := c.base
	x.Choices = []C{choice}
	c.st.Data(x)
}

// fail ends a stream whose run failed: the error in OpenAI's envelope and
// [DONE], unless the client is gone.
func (c chunks[C]) fail(err error) error {
	c.st.StopKeepAlive()
	if !errors.Is(err, context.Canceled) {
		c.st.Data(httpapi.Envelope(err))
		c.st.Write(doneFrame)
	}
	return err
}

// end ends a finished run's stream: the last choice (the finish reason),
// the usage chunk when the client asked for it, and [DONE].
func (c chunks[C]) end(last C, u server.Usage, o server.Outcome, includeUsage bool) error {
	c.st.StopKeepAlive()
	c.send(last)
	if includeUsage {
		x := c.base
		x.Choices, x.Usage, x.Timings = []C{}, usage(u), timings(u, o)
		c.st.Data(x)
	}
	c.st.Write(doneFrame)
	return nil
}

// timingsJSON is llama-server's non-standard "timings" object (clients
// ignore it; scripts and benchmarks read it), sent with the usage.
type timingsJSON struct {
	CacheN             int     `json:"cache_n"`
	PromptN            int     `json:"prompt_n"`
	PromptMS           float64 `json:"prompt_ms"`
	PromptPerSecond    float64 `json:"prompt_per_second"`
	PredictedN         int     `json:"predicted_n"`
	PredictedMS        float64 `json:"predicted_ms"`
	PredictedPerSecond float64 `json:"predicted_per_second"`
	// ServerMS is the part of PredictedMS the server spent on its own
	// per-token work (stop strings, parsing, encoding, writing).
	ServerMS float64 `json:"server_ms"`
}

func timings(u server.Usage, o server.Outcome) *timingsJSON {
	t := &timingsJSON{CacheN: u.CachedTokens, PromptN: u.PromptTokens - u.CachedTokens, PredictedN: u.CompletionTokens,
		PromptMS: float64(o.Prefill.Microseconds()) / 1e3, PredictedMS: float64(o.Decode.Microseconds()) / 1e3,
		ServerMS: float64(o.Callbacks.Microseconds()) / 1e3}
	if o.Prefill > 0 {
		t.PromptPerSecond = float64(t.PromptN) / o.Prefill.Seconds()
	}
	if o.Decode > 0 && u.CompletionTokens > 1 {
		t.PredictedPerSecond = float64(u.CompletionTokens-1) / o.Decode.Seconds() // as nvmai-run: steps after the first token
	}
	return t
}

// decodeChat reads a chat request and converts it for the core.
func (a *Adapter) decodeChat(w http.ResponseWriter, r *http.Request) (*chatRequest, *server.ChatRequest, error) {
	var req chatRequest
	if err := httpapi.DecodeJSON(w, r, &req); err != nil {
		return nil, nil, err
	}
	creq, err := toChat(&req, a.defaults(req.Model))
	return &req, creq, err
}

func (a *Adapter) chat(w http.ResponseWriter, r *http.Request, log *server.RequestLog) error {
	req, creq, err := a.decodeChat(w, r)
	if err != nil {
		return err
	}
	log.Stream = req.Stream
	job, err := a.s.PrepareChat(creq)
	if err != nil {
		return err
	}
	if err := waitForModel(r.Context(), job, req.Stream); err != nil {
		return err
	}
	base := chatJSON{ID: a.s.NewID("chatcmpl-"), Created: a.s.Now().Unix(), Model: job.Model()}
	if !req.Stream {
		res, err := job.RunChat(r.Context(), nil)
		if err != nil {
			return err
		}
		log.Finished(job, res.Usage, res.Outcome, res.Finish)
		base.Object = "chat.completion"
		return httpapi.WriteJSON(w, http.StatusOK, base.answer(choiceJSON{Message: finalMessage(res), FinishReason: &res.Finish}, res.Usage, res.Outcome))
	}
	base.Object = "chat.completion.chunk"
	st := sse.Start(w, r, a.opt.KeepAlive, sse.Comment)
	defer st.Close()
	c := chunks[choiceJSON]{st: st, base: base}
	c.send(choiceJSON{Delta: roleDeltaJSON{Role: "assistant"}})
	res, err := job.RunChat(r.Context(), func(ev chatparse.Event) { c.send(choiceJSON{Delta: eventDelta(ev)}) })
	if err != nil {
		return c.fail(err)
	}
	log.Finished(job, res.Usage, res.Outcome, res.Finish)
	return c.end(choiceJSON{Delta: deltaJSON{}, FinishReason: &res.Finish}, res.Usage, res.Outcome, req.includeUsage())
}

// waitForModel lets a stream start only once the job's model is loaded,
// so that a load failure or a prompt the model refuses is answered with
// its HTTP status rather than inside a 200 stream. A job for the loaded
// model (and every job with one model) starts its stream at once, as
// before.
func waitForModel(ctx context.Context, job *server.Job, stream bool) error {
	if !stream || !job.NeedsLoad() {
		return nil
	}
	return job.Wait(ctx)
}

func finalMessage(res *server.ChatResult) *messageJSON {
	m := &messageJSON{Role: "assistant"}
	if res.Content != "" || len(res.ToolCalls) == 0 {
		c := res.Content
		m.Content = &c
	}
	if res.Reasoning != "" {
		r := res.Reasoning
		m.ReasoningContent = &r
	}
	for _, tc := range res.ToolCalls {
		args := tc.Arguments
		if args == "" {
			args = "{}"
		}
		m.ToolCalls = append(m.ToolCalls, toolCallJSON{ID: tc.ID, Type: "function", Function: functionJSON{Name: tc.Name, Arguments: &args}})
	}
	return m
}

func eventDelta(ev chatparse.Event) deltaJSON {
	text := ev.Text
	switch ev.Kind {
	case chatparse.Reasoning:
		return deltaJSON{ReasoningContent: &text}
	case chatparse.ToolCallStart:
		empty, i := "", ev.Index
		return deltaJSON{ToolCalls: []toolCallJSON{{Index: &i, ID: ev.ID, Type: "function", Function: functionJSON{Name: ev.Name, Arguments: &empty}}}}
	case chatparse.ToolCallArgs:
		i := ev.Index
		return deltaJSON{ToolCalls: []toolCallJSON{{Index: &i, Function: functionJSON{Arguments: &text}}}}
	}
	return deltaJSON{Content: &text}
}

// includeUsage reports whether a stream ends with a usage chunk.
func (f *samplingFields) includeUsage() bool {
	return f.StreamOptions != nil && f.StreamOptions.IncludeUsage
}

// doneFrame ends an OpenAI stream.
const doneFrame = "data: [DONE]\n\n"
