package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/jsonobj"
)

// Ceilings on what one request may hold: the body cap bounds bytes, these
// bound counts, so that a small body cannot ask for huge work.
const (
	maxItems    = 100_000
	maxTools    = 1024
	maxParts    = 10_000
	maxIDLength = 256
)

// request is a POST /v1/responses body. Fields the server does not use
// (include, prompt_cache_key, client_metadata, metadata, truncation, …)
// are ignored.
type request struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Reasoning          *struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	} `json:"reasoning"`
	Text *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	Store  *bool `json:"store"`
	Stream bool  `json:"stream"`

	// ConstrainTools false leaves this request's tool calls unconstrained
	// (nvmai's own field; docs/structured-output.md).
	ConstrainTools *bool `json:"nvmai_constrain_tools"`
	// FormatLimits tightens text.format's open lengths (nvmai's own field
	// nvmai_format_limits; docs/structured-output.md).
	FormatLimits json.RawMessage `json:"nvmai_format_limits"`
}

// item is one element of input. Which fields count depends on Type
// (message when absent but a role is given, as OpenAI's EasyInputMessage).
type item struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// function_call
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	// function_call_output
	Output json.RawMessage `json:"output"`
	// reasoning
	Summary []textPart `json:"summary"`
}

type textPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// converted is a request mapped onto the core, plus what the response
// object echoes and what the store keeps.
type converted struct {
	chat *server.ChatRequest
	// history is the conversation without the instructions (held
	// responses carry it; OpenAI does not carry instructions over).
	history []chattemplate.Message
	skipped []string // tools and items left out, for the log line
	effort  *string
	summary *string
}

func badRequest(param, format string, args ...any) *httpapi.Error {
	return httpapi.BadRequest(param, format, args...)
}

// convert validates r and maps it onto a core chat request, with prior the
// conversation of the previous response (nil when there is none).
func convert(r *request, prior []chattemplate.Message, defaults sample.Params) (*converted, error) {
	if len(r.Tools) > maxTools {
		return nil, badRequest("tools", "%d tools; at most %d are allowed", len(r.Tools), maxTools)
	}
	c := &converted{}
	msgs, skippedItems, err := inputMessages(r.Input)
	if err != nil {
		return nil, err
	}
	c.skipped = append(c.skipped, skippedItems...)
	c.history = append(append([]chattemplate.Message(nil), prior...), msgs...)
	req := &server.ChatRequest{Endpoint: "/v1/responses", Model: r.Model, ParallelToolCalls: true}
	req.Messages = normalizeSystem(r.Instructions, c.history)
	if len(req.Messages) == 0 {
		// The empty-input probe (Codex sends one with max_output_tokens 1):
		// an empty user turn, so the template has a query to render.
		req.Messages = []chattemplate.Message{{Role: "user"}}
	}
	tools, skipped, err := convertTools(r.Tools)
	if err != nil {
		return nil, err
	}
	req.Tools, c.skipped = tools, append(c.skipped, skipped...)
	if req.ToolChoice, req.ToolName, err = server.ParseToolChoice(r.ToolChoice, server.ToolChoiceFlat); err != nil {
		return nil, err
	}
	if r.ParallelToolCalls != nil {
		req.ParallelToolCalls = *r.ParallelToolCalls
	}
	req.NoToolConstraint = r.ConstrainTools != nil && !*r.ConstrainTools
	if r.MaxOutputTokens != nil {
		if *r.MaxOutputTokens < 1 {
			return nil, badRequest("max_output_tokens", "max_output_tokens must be at least 1, got %d", *r.MaxOutputTokens)
		}
		req.MaxTokens = *r.MaxOutputTokens
	}
	if r.Reasoning != nil {
		c.effort, c.summary = r.Reasoning.Effort, r.Reasoning.Summary
		if r.Reasoning.Effort != nil {
			req.Thinking = thinkingFor(*r.Reasoning.Effort)
			if t := req.Thinking; t != nil && *t {
				// A Qwen3.8 template reads the level (chattemplate.Features).
				req.ReasoningEffort, req.EffortParam = *r.Reasoning.Effort, "reasoning.effort"
			}
		}
	}
	if r.Text != nil {
		if req.Format, err = textFormat(r.Text.Format, r.FormatLimits); err != nil {
			return nil, err
		}
	}
	if req.Sampling, err = sampling(r, defaults); err != nil {
		return nil, err
	}
	c.chat = req
	return c, nil
}

// thinkingFor maps reasoning.effort onto Qwen's one switch: none and
// minimal turn thinking off; low, medium, high and xhigh leave it on (the
// model has no budget knob, but a Qwen3.8 template's reasoning_effort gets
// the level); anything else leaves the server's default.
func thinkingFor(effort string) *bool {
	on := true
	switch effort {
	case "none", "minimal":
		on = false
	case "low", "medium", "high", "xhigh":
	default:
		return nil
	}
	return &on
}

func sampling(r *request, defaults sample.Params) (sample.Params, error) {
	p := defaults
	if r.Temperature != nil {
		p.Temperature = *r.Temperature
		if p.Temperature > 0 && defaults.Temperature == 0 {
			p.TopP = 1 // the model's greedy default carries no nucleus setting
		}
	}
	if r.TopP != nil {
		p.TopP = *r.TopP
	}
	if p.Seed == 0 { // nonzero: serve --seed's default
		p.Seed = rand.Uint64()
	}
	if err := p.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), "sample: ")
		return p, badRequest(strings.Fields(msg)[0], "%s", msg)
	}
	return p, nil
}

// textFormat compiles text.format: text (or absent) is free text,
// json_object any object, json_schema {name, schema, strict} the schema.
func textFormat(raw, limits json.RawMessage) (*jsonconstrain.Schema, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	opts, err := server.FormatOptions(limits)
	if err != nil {
		return nil, badRequest(server.FormatLimitsField, "%v", err)
	}
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, badRequest("text.format", "text.format must be an object with a type: %v", err)
	}
	switch f.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return jsonconstrain.ObjectMode(opts), nil
	case "json_schema":
		if len(f.Schema) == 0 {
			return nil, badRequest("text.format.schema", "text.format json_schema needs a schema")
		}
		s, err := jsonconstrain.CompileCached(f.Schema, opts)
		if err != nil {
			return nil, badRequest("text.format.schema", "text.format.schema: %v", err)
		}
		return s, nil
	}
	return nil, badRequest("text.format.type", "text.format.type %q: expected text, json_object or json_schema", f.Type)
}

// normalizeSystem puts the instructions and every system/developer
// message that comes before the first other message into one leading
// system turn (the Qwen templates refuse a system turn anywhere else);
// later system/developer messages become user turns, so that the cached
// prefix of the conversation stays as it was.
func normalizeSystem(instructions *string, history []chattemplate.Message) []chattemplate.Message {
	var sys []string
	if instructions != nil && *instructions != "" {
		sys = append(sys, *instructions)
	}
	rest := history
	for len(rest) > 0 && rest[0].Role == "system" {
		sys = append(sys, text(rest[0]))
		rest = rest[1:]
	}
	out := make([]chattemplate.Message, 0, len(rest)+1)
	if len(sys) > 0 {
		out = append(out, chattemplate.Message{Role: "system", Content: strings.Join(sys, "\n\n")})
	}
	for _, m := range rest {
		if m.Role == "system" {
			m.Role = "user"
		}
		out = append(out, m)
	}
	return out
}

func text(m chattemplate.Message) string {
	if m.Parts == nil {
		return m.Content
	}
	var b strings.Builder
	for _, p := range m.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// inputMessages maps input (a string, or items) onto template messages.
// Consecutive assistant-side items (reasoning, an assistant message,
// function calls) form one assistant turn, as the model produced them.
func inputMessages(raw json.RawMessage) ([]chattemplate.Message, []string, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []chattemplate.Message{{Role: "user", Content: s}}, nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, badRequest("input", "input: expected a string or an array of items")
	}
	if len(items) > maxItems {
		return nil, nil, badRequest("input", "input has %d items; at most %d are allowed", len(items), maxItems)
	}
	b := &builder{}
	for i, rawItem := range items {
		if err := b.add(rawItem, fmt.Sprintf("input[%d]", i)); err != nil {
			return nil, nil, err
		}
	}
	return b.msgs, b.skipped, nil
}

type builder struct {
	msgs      []chattemplate.Message
	reasoning *string // a reasoning item waiting for its assistant turn
	open      bool    // the last message is an assistant turn still open to calls
	skipped   []string
}

func (b *builder) add(raw json.RawMessage, param string) error {
	var it item
	if err := json.Unmarshal(raw, &it); err != nil {
		return badRequest(param, "%s must be an object: %v", param, err)
	}
	typ := it.Type
	if typ == "" && it.Role != "" {
		typ = "message"
	}
	switch typ {
	case "message":
		return b.message(&it, param)
	case "function_call":
		return b.call(&it, param)
	case "function_call_output":
		return b.callOutput(&it, param)
	case "reasoning":
		return b.reasoningItem(&it, param)
	case "":
		return badRequest(param+".type", "%s has no type", param)
	}
	// item_reference, custom_tool_call, web_search_call, …: nothing the
	// model can read back; skip it rather than fail an agent's turn.
	b.skipped = append(b.skipped, param+" ("+typ+")")
	return nil
}

func (b *builder) message(it *item, param string) error {
	m := chattemplate.Message{Role: it.Role}
	switch it.Role {
	case "developer", "system":
		m.Role = "system"
	case "user", "assistant":
	case "":
		return badRequest(param+".role", "%s has no role", param)
	default:
		return badRequest(param+".role", "%s.role %q: expected user, assistant, system or developer", param, it.Role)
	}
	content, err := contentText(it.Content, param+".content", false)
	if err != nil {
		return err
	}
	if m.Role == "assistant" {
		if b.open && len(b.last().ToolCalls) == 0 {
			// A second assistant message in a row: one turn of text.
			b.last().Content += content
			return nil
		}
		m.Content, m.ReasoningContent = content, b.reasoning
		b.reasoning, b.open = nil, true
		b.msgs = append(b.msgs, m)
		return nil
	}
	m.Content = content
	b.close()
	b.msgs = append(b.msgs, m)
	return nil
}

func (b *builder) call(it *item, param string) error {
	if it.Name == "" {
		return badRequest(param+".name", "%s (function_call) has no name", param)
	}
	if it.CallID == "" {
		return badRequest(param+".call_id", "%s (function_call) has no call_id", param)
	}
	args, err := server.ToolArguments(it.Arguments, param+".arguments")
	if err != nil {
		return err
	}
	if !b.open {
		b.msgs = append(b.msgs, chattemplate.Message{Role: "assistant", ContentNull: true, ReasoningContent: b.reasoning})
		b.reasoning, b.open = nil, true
	}
	last := b.last()
	last.ToolCalls = append(last.ToolCalls, chattemplate.ToolCall{ID: it.CallID, Name: it.Name, Arguments: args})
	return nil
}

func (b *builder) callOutput(it *item, param string) error {
	if it.CallID == "" {
		return badRequest(param+".call_id", "%s (function_call_output) has no call_id", param)
	}
	out, err := contentText(it.Output, param+".output", true)
	if err != nil {
		return err
	}
	b.close()
	b.msgs = append(b.msgs, chattemplate.Message{Role: "tool", ToolCallID: it.CallID, Content: out})
	return nil
}

// reasoningItem keeps the item's text (its content, else its summary) for
// the assistant turn that follows; an item with neither (only
// encrypted_content, which this server never issues) adds nothing.
func (b *builder) reasoningItem(it *item, param string) error {
	t, err := contentText(it.Content, param+".content", true)
	if err != nil {
		return err
	}
	if t == "" {
		for _, p := range it.Summary {
			if p.Text != nil {
				if t != "" {
					t += "\n\n"
				}
				t += *p.Text
			}
		}
	}
	if t == "" {
		return nil
	}
	if b.reasoning != nil {
		t = *b.reasoning + "\n\n" + t
	}
	b.close()
	b.reasoning = &t
	return nil
}

func (b *builder) last() *chattemplate.Message { return &b.msgs[len(b.msgs)-1] }

// close ends the open assistant turn; a reasoning item left without a turn
// after it is dropped (the model never saw it either).
func (b *builder) close() { b.open, b.reasoning = false, nil }

// contentText joins a content field's text: a string, or parts of type
// input_text, output_text, text, reasoning_text, summary_text or refusal.
// Images and files are refused (a text-only model), except inside tool
// output (lenient), where they become a placeholder so an agent loop goes
// on.
func contentText(raw json.RawMessage, param string, lenient bool) (string, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type    string  `json:"type"`
		Text    *string `json:"text"`
		Refusal *string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s: expected a string or an array of content parts", param)
	}
	if len(parts) > maxParts {
		return "", badRequest(param, "%s has %d parts; at most %d are allowed", param, len(parts), maxParts)
	}
	var b strings.Builder
	for k, p := range parts {
		switch {
		case p.Type == "refusal" && p.Refusal != nil:
			b.WriteString(*p.Refusal)
		case isTextPart(p.Type) && p.Text != nil:
			b.WriteString(*p.Text)
		case lenient:
			fmt.Fprintf(&b, "[%s omitted: this model reads text only]", p.Type)
		default:
			return "", badRequest(fmt.Sprintf("%s[%d]", param, k), "%s[%d] has type %q; this server runs a text-only model and takes only text parts", param, k, p.Type)
		}
	}
	return b.String(), nil
}

func isTextPart(t string) bool {
	switch t {
	case "input_text", "output_text", "text", "reasoning_text", "summary_text":
		return true
	}
	return false
}

// convertTools maps Responses' flat function tools
// {type, name, description, parameters, strict} onto the core's
// {"type":"function","function":{…}}, keeping the client's key order (the
// template prints tools as sent). Tool types the runtime cannot serve
// (web_search, custom, namespace, local_shell, mcp, …) are skipped.
func convertTools(in []json.RawMessage) ([]json.RawMessage, []string, error) {
	var out []json.RawMessage
	var skipped []string
	for i, raw := range in {
		param := fmt.Sprintf("tools[%d]", i)
		fields, err := jsonobj.Fields(raw)
		if err != nil {
			return nil, nil, badRequest(param, "%s must be an object: %v", param, err)
		}
		var head struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		json.Unmarshal(raw, &head)
		if head.Type != "function" {
			name := head.Type
			if head.Name != "" {
				name += " " + head.Name
			}
			skipped = append(skipped, name)
			continue
		}
		if head.Name == "" {
			return nil, nil, badRequest(param+".name", "%s (function) has no name", param)
		}
		var b bytes.Buffer
		b.WriteString(`{"type":"function","function":{`)
		first := true
		for _, f := range fields {
			if f.Key == "type" {
				continue
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			k, _ := json.Marshal(f.Key)
			b.Write(k)
			b.WriteByte(':')
			b.Write(f.Value)
		}
		b.WriteString("}}")
		out = append(out, json.RawMessage(b.Bytes()))
	}
	return out, skipped, nil
}
