package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
)

// Ceilings on what one request may hold (the body cap bounds bytes; these
// bound counts, so that a small body cannot ask for huge work).
const (
	maxMessages = 100_000
	maxTools    = 1024
	maxStops    = 4
)

// samplingFields are the sampling knobs both endpoints take.
type samplingFields struct {
	Temperature       *float64 `json:"temperature"`
	TopP              *float64 `json:"top_p"`
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	PresencePenalty   *float64 `json:"presence_penalty"`
	FrequencyPenalty  *float64 `json:"frequency_penalty"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	Seed              *int64   `json:"seed"`
	N                 *int     `json:"n"`
	Logprobs          *bool    `json:"logprobs"`
	Stream            bool     `json:"stream"`
	StreamOptions     *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens *int `json:"max_tokens"`
	// FormatLimits tightens response_format's open lengths (nvmai's own
	// field nvmai_format_limits; docs/structured-output.md).
	FormatLimits json.RawMessage `json:"nvmai_format_limits"`
	// Fields this server cannot honour: refused when set to anything but
	// their default (unsupported), so that no request is silently
	// answered as if they had been applied.
	LogitBias   map[string]json.RawMessage `json:"logit_bias"`
	TopLogprobs *int                       `json:"top_logprobs"`
}

type chatRequest struct {
	Model    string    `json:"model"`
	Messages []message `json:"messages"`
	samplingFields
	Stop                json.RawMessage   `json:"stop"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls"`
	ResponseFormat      json.RawMessage   `json:"response_format"`
	ChatTemplateKwargs  map[string]any    `json:"chat_template_kwargs"`
	ReasoningEffort     *string           `json:"reasoning_effort"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
	Functions           json.RawMessage   `json:"functions"`
	FunctionCall        json.RawMessage   `json:"function_call"`
	Audio               json.RawMessage   `json:"audio"`
	Modalities          []string          `json:"modalities"`

	// ConstrainTools false leaves this request's tool calls unconstrained
	// (nvmai's own field; docs/structured-output.md).
	ConstrainTools *bool `json:"nvmai_constrain_tools"`
}

type message struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCallID       string          `json:"tool_call_id"`
	ToolCalls        []toolCallIn    `json:"tool_calls"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
}

type toolCallIn struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	samplingFields
	Stop           json.RawMessage `json:"stop"`
	Echo           bool            `json:"echo"`
	ResponseFormat json.RawMessage `json:"response_format"`
	BestOf         *int            `json:"best_of"`
	Suffix         *string         `json:"suffix"`
}

// unsupported refuses the fields of /v1/completions this server cannot
// honour, naming the field (#44 S16); their defaults pass.
func (r *completionRequest) unsupported() error {
	switch {
	case r.Echo:
		return badRequest("echo", "echo is not supported")
	case r.BestOf != nil && *r.BestOf != 1:
		return badRequest("best_of", "best_of %d is not supported: this server generates one completion per request (send best_of 1 or leave it out)", *r.BestOf)
	case r.Suffix != nil && *r.Suffix != "":
		return badRequest("suffix", "suffix is not supported (fill-in-the-middle needs a model trained for it); leave it out")
	}
	return r.samplingFields.unsupported()
}

// unsupported refuses the fields of /v1/chat/completions this server
// cannot honour (#44 S16); their defaults pass.
func (r *chatRequest) unsupported() error {
	switch {
	case !isEmpty(r.Functions):
		return badRequest("functions", "functions (the legacy function-calling API) is not supported; send tools with {\"type\":\"function\",\"function\":{…}} instead")
	case strings.HasPrefix(strings.TrimSpace(string(r.FunctionCall)), "{"): // "none" and "auto" name no function
		return badRequest("function_call", "function_call (the legacy function-calling API) is not supported; send tool_choice instead")
	case !isEmpty(r.Audio):
		return badRequest("audio", "audio output is not supported: this server runs a text-only model")
	}
	for i, m := range r.Modalities {
		if m != "text" {
			return badRequest(fmt.Sprintf("modalities[%d]", i), "modalities[%d] %q is not supported: this server generates text only", i, m)
		}
	}
	return r.samplingFields.unsupported()
}

func (f *samplingFields) unsupported() error {
	if len(f.LogitBias) > 0 {
		return badRequest("logit_bias", "logit_bias is not supported (it would be ignored); leave it out or send {}")
	}
	if f.TopLogprobs != nil && *f.TopLogprobs != 0 {
		return badRequest("top_logprobs", "top_logprobs is not supported (logprobs are not returned)")
	}
	return nil
}

// isEmpty reports an absent, null, empty array or empty object value.
func isEmpty(raw json.RawMessage) bool {
	switch strings.TrimSpace(string(raw)) {
	case "", "null", "[]", "{}":
		return true
	}
	return false
}

func badRequest(param, format string, args ...any) *httpapi.Error {
	return httpapi.BadRequest(param, format, args...)
}

// sampling maps the request's knobs over the model's defaults.
func (f *samplingFields) sampling(defaults sample.Params) (sample.Params, error) {
	p := defaults
	if f.Temperature != nil {
		p.Temperature = *f.Temperature
		if p.Temperature > 0 && defaults.Temperature == 0 {
			p.TopP = 1 // the model's greedy default carries no nucleus setting
		}
	}
	if f.TopP != nil {
		p.TopP = *f.TopP
	}
	if f.TopK != nil {
		k, err := server.TopK(*f.TopK, "top_k")
		if err != nil {
			return p, err
		}
		p.TopK = k
	}
	if f.MinP != nil {
		p.MinP = *f.MinP
	}
	if f.PresencePenalty != nil {
		p.PresencePenalty = *f.PresencePenalty
	}
	if f.FrequencyPenalty != nil {
		p.FrequencyPenalty = *f.FrequencyPenalty
	}
	if f.RepetitionPenalty != nil {
		// 0 means "unset" in sample.Params, so an explicit 0 is refused
		// here rather than silently turned off.
		if *f.RepetitionPenalty == 0 {
			return p, badRequest("repetition_penalty", "repetition_penalty 0 must be a finite number > 0 (1 = disabled)")
		}
		p.RepetitionPenalty = *f.RepetitionPenalty
	}
	if f.Seed != nil {
		p.Seed = uint64(*f.Seed)
	} else if p.Seed == 0 { // nonzero: serve --seed's default
		p.Seed = rand.Uint64()
	}
	if err := p.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), "sample: ")
		return p, badRequest(strings.Fields(msg)[0], "%s", msg)
	}
	if f.N != nil && *f.N != 1 {
		return p, badRequest("n", "n must be 1 (this server generates one choice per request)")
	}
	if f.Logprobs != nil && *f.Logprobs {
		return p, badRequest("logprobs", "logprobs are not supported")
	}
	return p, nil
}

func decodeStop(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "field \"stop\": expected a string or an array of strings")
	}
	if len(many) > maxStops {
		return nil, badRequest("stop", "stop has %d strings; at most %d are allowed", len(many), maxStops)
	}
	return many, nil
}

func maxTokens(maxTok, maxCompletion *int) (int, error) {
	if maxTok != nil && maxCompletion != nil {
		return 0, badRequest("max_tokens", "give max_tokens or max_completion_tokens, not both")
	}
	v := maxTok
	if v == nil {
		v = maxCompletion
	}
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, badRequest("max_tokens", "max_tokens must be at least 1, got %d", *v)
	}
	return *v, nil
}

// toChat validates a chat request and maps it onto the core's.
func toChat(r *chatRequest, defaults sample.Params) (*server.ChatRequest, error) {
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "messages is empty; send at least one message")
	}
	if len(r.Messages) > maxMessages || len(r.Tools) > maxTools {
		return nil, badRequest("messages", "too many messages (at most %d) or tools (at most %d)", maxMessages, maxTools)
	}
	if err := r.unsupported(); err != nil {
		return nil, err
	}
	msgs, err := convertMessages(r.Messages)
	if err != nil {
		return nil, err
	}
	req := &server.ChatRequest{Endpoint: "/v1/chat/completions", Model: r.Model, Messages: msgs, Kwargs: r.ChatTemplateKwargs, ParallelToolCalls: true}
	if err := checkTools(r.Tools); err != nil {
		return nil, err
	}
	req.Tools = r.Tools
	if req.ToolChoice, req.ToolName, err = server.ParseToolChoice(r.ToolChoice, server.ToolChoiceChat); err != nil {
		return nil, err
	}
	if r.ParallelToolCalls != nil {
		req.ParallelToolCalls = *r.ParallelToolCalls
	}
	req.NoToolConstraint = r.ConstrainTools != nil && !*r.ConstrainTools
	if req.Format, err = responseFormat(r.ResponseFormat, r.FormatLimits); err != nil {
		return nil, err
	}
	if e := r.ReasoningEffort; e != nil {
		switch *e {
		case "none", "minimal":
			off := false
			req.Thinking = &off
		case "low", "medium", "high", "xhigh":
			on := true
			req.Thinking = &on
			req.ReasoningEffort, req.EffortParam = *e, "reasoning_effort"
		default:
			return nil, badRequest("reasoning_effort", "reasoning_effort %q: expected none, minimal, low, medium, high or xhigh", *e)
		}
	}
	if req.Sampling, err = r.sampling(defaults); err != nil {
		return nil, err
	}
	if req.Stop, err = decodeStop(r.Stop); err != nil {
		return nil, err
	}
	if req.MaxTokens, err = maxTokens(r.MaxTokens, r.MaxCompletionTokens); err != nil {
		return nil, err
	}
	return req, nil
}

// responseFormat compiles response_format into the core's Format (nil for
// text or no field). A schema nvmai cannot enforce is a 400 naming the
// field and every unsupported keyword with its place in the schema.
func responseFormat(raw, limits json.RawMessage) (*jsonconstrain.Schema, error) {
	opts, err := server.FormatOptions(limits)
	if err != nil {
		return nil, badRequest(server.FormatLimitsField, "%v", err)
	}
	f, err := jsonconstrain.FromResponseFormat(raw, opts)
	var rfe *jsonconstrain.ResponseFormatError
	switch {
	case err == nil:
		return f, nil
	case errors.As(err, &rfe):
		var se *jsonconstrain.SchemaError
		if errors.As(rfe.Err, &se) {
			return nil, badRequest(rfe.Param, "%s", se.Error())
		}
		return nil, badRequest(rfe.Param, "%s %s", rfe.Param, rfe.Err.Error())
	}
	return nil, badRequest("response_format", "response_format: %v", err)
}

func checkTools(tools []json.RawMessage) error {
	for i, raw := range tools {
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d] must be an object: %v", i, err)
		}
		if t.Type != "function" || t.Function == nil || t.Function.Name == "" {
			return badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d] must be {\"type\":\"function\",\"function\":{\"name\":…}}", i)
		}
	}
	return nil
}

// convertMessages maps OpenAI messages onto the template's: developer
// becomes system, leading system messages merge into one, content parts
// must be text, and tool-call arguments sent as a JSON string are decoded
// to the object the template iterates.
func convertMessages(in []message) ([]chattemplate.Message, error) {
	out := make([]chattemplate.Message, 0, len(in))
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		cm := chattemplate.Message{Role: m.Role, ToolCallID: m.ToolCallID, Name: m.Name}
		switch m.Role {
		case "developer":
			cm.Role = "system"
		case "system", "user", "assistant", "tool":
		case "":
			return nil, badRequest(param+".role", "%s has no role", param)
		default:
			return nil, badRequest(param+".role", "%s.role %q: expected system, developer, user, assistant or tool", param, m.Role)
		}
		var err error
		if cm.Content, cm.Parts, err = decodeContent(m.Content, param); err != nil {
			return nil, err
		}
		if m.ReasoningContent != nil {
			cm.ReasoningContent = m.ReasoningContent
		} else if m.Reasoning != nil {
			cm.ReasoningContent = m.Reasoning
		}
		for j, tc := range m.ToolCalls {
			args, err := server.ToolArguments(tc.Function.Arguments, fmt.Sprintf("%s.tool_calls[%d].function.arguments", param, j))
			if err != nil {
				return nil, err
			}
			cm.ToolCalls = append(cm.ToolCalls, chattemplate.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
		}
		if cm.Role == "system" && len(out) > 0 && out[len(out)-1].Role == "system" && len(out) == 1 {
			out[0].Content = strings.TrimRight(out[0].Content, "\n") + "\n\n" + flatten(cm)
			out[0].Parts = nil
			continue
		}
		out = append(out, cm)
	}
	return out, nil
}

func flatten(m chattemplate.Message) string {
	if m.Parts == nil {
		return m.Content
	}
	var b strings.Builder
	for _, p := range m.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func decodeContent(raw json.RawMessage, param string) (string, []chattemplate.Part, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, badRequest(param+".content", "%s.content: expected a string or an array of {\"type\":\"text\",\"text\":…} parts", param)
	}
	out := make([]chattemplate.Part, 0, len(parts))
	for k, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", nil, badRequest(fmt.Sprintf("%s.content[%d]", param, k), "%s.content[%d] has type %q; this server runs a text-only model and takes only text parts", param, k, p.Type)
		}
		out = append(out, chattemplate.Part{Type: "text", Text: *p.Text})
	}
	return "", out, nil
}

func decodePrompt(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil && len(many) == 1 {
		return many[0], nil
	}
	return "", badRequest("prompt", "prompt: expected a string (or an array of one string)")
}
