package anthropic

import (
	"bytes"
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

// Ceilings on what one request may hold. The body cap bounds bytes; these
// bound counts, so that a small body cannot ask for outsized work (the
// stop matcher's cost grows with the number and length of stop strings).
const (
	maxMessages     = 100_000 // Anthropic's own limit
	maxTools        = 1024
	maxStops        = 16
	maxStopBytes    = 1024
	maxBlocks       = 10_000 // content blocks of one message
	billingPrefix   = "x-anthropic-billing-header:"
	imageOmitted    = "[image omitted: this model reads text only]"
	toolErrorPrefix = "Error: "
)

// messagesRequest is the body of POST /v1/messages (and, without
// max_tokens, of /v1/messages/count_tokens). Unknown fields (metadata,
// service_tier, container, context_management, …) are ignored.
type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []message       `json:"messages"`
	Tools         []tool          `json:"tools"`
	ToolChoice    *toolChoice     `json:"tool_choice"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Thinking      *thinkingConfig `json:"thinking"`
	Stream        bool            `json:"stream"`
	// ConstrainTools false leaves this request's tool calls unconstrained
	// (nvmai's own field; docs/structured-output.md).
	ConstrainTools *bool `json:"nvmai_constrain_tools"`
	// FormatLimits tightens output_format's open lengths (nvmai's own
	// field nvmai_format_limits; docs/structured-output.md).
	FormatLimits json.RawMessage `json:"nvmai_format_limits"`
	// OutputFormat is the structured-outputs beta's field; OutputConfig
	// .Format the same object where the API has it now.
	OutputFormat json.RawMessage `json:"output_format"`
	OutputConfig *struct {
		Format json.RawMessage `json:"format"`
		// Effort is the effort parameter: low, medium, high (the API's
		// default) or max.
		Effort *string `json:"effort"`
	} `json:"output_config"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// block is any content block; which fields count depends on Type.
type block struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`      // text
	Thinking  *string         `json:"thinking"`  // thinking
	Signature string          `json:"signature"` // thinking
	ID        string          `json:"id"`        // tool_use
	Name      string          `json:"name"`      // tool_use
	Input     json.RawMessage `json:"input"`     // tool_use
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: string or blocks
	IsError   bool            `json:"is_error"`
}

type tool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type toolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

type thinkingConfig struct {
	Type         string `json:"type"`
	BudgetTokens *int   `json:"budget_tokens"`
}

func badRequest(param, format string, args ...any) error {
	return httpapi.BadRequest(param, format, args...)
}

// converter maps a decoded request onto the core's ChatRequest.
type converter struct {
	defaults sample.Params
	// ownThinking reports whether a thinking block's signature is this
	// server's (see signature.go).
	ownThinking func(text, signature string) bool
	// counting is true for count_tokens, where max_tokens is optional.
	counting bool
}

func (c *converter) toChat(r *messagesRequest) (*server.ChatRequest, error) {
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "messages: send at least one message")
	}
	if len(r.Messages) > maxMessages || len(r.Tools) > maxTools {
		return nil, badRequest("messages", "too many messages (at most %d) or tools (at most %d)", maxMessages, maxTools)
	}
	req := &server.ChatRequest{Endpoint: "/v1/messages", Model: r.Model, ParallelToolCalls: true, ClampMaxTokens: true,
		NoToolConstraint: r.ConstrainTools != nil && !*r.ConstrainTools}
	if c.counting {
		req.Endpoint = "/v1/messages/count_tokens"
	}
	steps := []func(*messagesRequest, *server.ChatRequest) error{
		c.messages, c.tools, c.toolChoice, c.thinking, c.sampling, c.stops, c.maxTokens, c.outputFormat,
	}
	for _, step := range steps {
		if err := step(r, req); err != nil {
			return nil, err
		}
	}
	return req, nil
}

func (c *converter) messages(r *messagesRequest, req *server.ChatRequest) error {
	sys, err := systemText(r.System)
	if err != nil {
		return err
	}
	if sys != "" {
		req.Messages = append(req.Messages, chattemplate.Message{Role: "system", Content: sys})
	}
	names := map[string]string{} // tool_use id → name, for tool results
	for i, m := range r.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		var out []chattemplate.Message
		switch m.Role {
		case "user":
			out, err = userMessages(m.Content, param, names)
		case "assistant":
			var am chattemplate.Message
			am, err = c.assistantMessage(m.Content, param)
			for _, tc := range am.ToolCalls {
				names[tc.ID] = tc.Name
			}
			out = []chattemplate.Message{am}
		case "":
			err = badRequest(param+".role", "%s.role is missing: expected user or assistant", param)
		default:
			err = badRequest(param+".role", "%s.role %q: expected user or assistant (the system prompt goes in the top-level system field)", param, m.Role)
		}
		if err != nil {
			return err
		}
		req.Messages = append(req.Messages, out...)
	}
	return nil
}

// systemText joins the system prompt's text blocks, without Claude Code's
// billing-header block: its cch= value changes with every request, and
// rendered first it would make every prompt differ from the cached one at
// its first tokens.
func systemText(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	blocks, err := decodeBlocks(raw, "system")
	if err != nil {
		return "", err
	}
	var texts []string
	for i, b := range blocks {
		if b.Type != "text" || b.Text == nil {
			return "", badRequest(fmt.Sprintf("system[%d]", i), "system[%d] has type %q: the system prompt takes text blocks only", i, b.Type)
		}
		if strings.HasPrefix(strings.TrimSpace(*b.Text), billingPrefix) {
			continue
		}
		texts = append(texts, *b.Text)
	}
	return strings.Join(texts, "\n\n"), nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// decodeBlocks reads content that must be an array of blocks.
func decodeBlocks(raw json.RawMessage, param string) ([]block, error) {
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, badRequest(param, "%s: expected a string or an array of content blocks (%v)", param, unwrapJSON(err))
	}
	if len(blocks) > maxBlocks {
		return nil, badRequest(param, "%s has %d content blocks; at most %d are allowed", param, len(blocks), maxBlocks)
	}
	return blocks, nil
}

func unwrapJSON(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q is JSON %s", te.Field, te.Value)
	}
	return err.Error()
}

// userMessages maps a user turn. Its tool_result blocks become tool
// messages, first and in their order, since they answer the previous
// assistant turn's calls and the template must see them right after it;
// its text blocks become one user message after them (Claude Code sends
// tool results followed by text such as <system-reminder> blocks).
func userMessages(raw json.RawMessage, param string, names map[string]string) ([]chattemplate.Message, error) {
	if isNull(raw) {
		return nil, badRequest(param+".content", "%s.content is missing", param)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []chattemplate.Message{{Role: "user", Content: s}}, nil
	}
	blocks, err := decodeBlocks(raw, param+".content")
	if err != nil {
		return nil, err
	}
	var out []chattemplate.Message
	var texts []string
	for k, b := range blocks {
		bp := fmt.Sprintf("%s.content[%d]", param, k)
		switch b.Type {
		case "text":
			if b.Text == nil {
				return nil, badRequest(bp+".text", "%s.text is missing", bp)
			}
			texts = append(texts, *b.Text)
		case "tool_result":
			content, err := toolResultText(b, bp)
			if err != nil {
				return nil, err
			}
			out = append(out, chattemplate.Message{Role: "tool", Content: content, ToolCallID: b.ToolUseID, Name: names[b.ToolUseID]})
		case "image", "document":
			return nil, badRequest(bp, "%s is an %s block; this server runs a text-only model", bp, b.Type)
		default:
			return nil, badRequest(bp, "%s has type %q; a user message takes text and tool_result blocks", bp, b.Type)
		}
	}
	if len(texts) > 0 || len(out) == 0 {
		out = append(out, chattemplate.Message{Role: "user", Content: strings.Join(texts, "\n\n")})
	}
	return out, nil
}

// toolResultText flattens a tool_result's content (a string or text and
// image blocks); an image becomes a placeholder rather than a refusal, so
// that an agent whose tool returned one can go on. is_error marks the text.
func toolResultText(b block, param string) (string, error) {
	var text string
	switch {
	case isNull(b.Content):
	case json.Unmarshal(b.Content, &text) == nil:
	default:
		blocks, err := decodeBlocks(b.Content, param+".content")
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, len(blocks))
		for k, cb := range blocks {
			switch {
			case cb.Type == "text" && cb.Text != nil:
				parts = append(parts, *cb.Text)
			case cb.Type == "image":
				parts = append(parts, imageOmitted)
			default:
				return "", badRequest(fmt.Sprintf("%s.content[%d]", param, k), "%s.content[%d] has type %q; a tool_result takes text (and image) blocks", param, k, cb.Type)
			}
		}
		text = strings.Join(parts, "\n\n")
	}
	if b.IsError {
		text = toolErrorPrefix + text
	}
	return text, nil
}

// assistantMessage maps an assistant turn: text blocks concatenated as the
// model wrote them, thinking that is this server's (or unsigned) as the
// turn's reasoning, tool_use blocks as tool calls.
func (c *converter) assistantMessage(raw json.RawMessage, param string) (chattemplate.Message, error) {
	m := chattemplate.Message{Role: "assistant"}
	if isNull(raw) {
		return m, badRequest(param+".content", "%s.content is missing", param)
	}
	if json.Unmarshal(raw, &m.Content) == nil {
		return m, nil
	}
	blocks, err := decodeBlocks(raw, param+".content")
	if err != nil {
		return m, err
	}
	var text strings.Builder
	var reasoning []string
	for k, b := range blocks {
		bp := fmt.Sprintf("%s.content[%d]", param, k)
		switch b.Type {
		case "text":
			if b.Text == nil {
				return m, badRequest(bp+".text", "%s.text is missing", bp)
			}
			text.WriteString(*b.Text)
		case "thinking":
			if b.Thinking == nil {
				return m, badRequest(bp+".thinking", "%s.thinking is missing", bp)
			}
			if b.Signature == "" || c.ownThinking(*b.Thinking, b.Signature) {
				reasoning = append(reasoning, *b.Thinking)
			}
		case "redacted_thinking":
			// Opaque to this server (it never makes one): dropped.
		case "tool_use":
			if b.Name == "" {
				return m, badRequest(bp+".name", "%s.name is missing", bp)
			}
			args, err := server.ToolArguments(b.Input, bp+".input")
			if err != nil {
				return m, err
			}
			m.ToolCalls = append(m.ToolCalls, chattemplate.ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		default:
			return m, badRequest(bp, "%s has type %q; an assistant message takes text, thinking, redacted_thinking and tool_use blocks", bp, b.Type)
		}
	}
	m.Content = text.String()
	if len(reasoning) > 0 {
		r := strings.Join(reasoning, "\n\n")
		m.ReasoningContent = &r
	}
	return m, nil
}

// tools maps Anthropic's {name, description, input_schema} onto the core's
// OpenAI-shaped tool objects, keeping the schema's bytes (and so its key
// order). Server tools (a type other than custom: bash_…, web_search_…,
// text_editor_…) have no implementation here and are left out.
func (c *converter) tools(r *messagesRequest, req *server.ChatRequest) error {
	for i, t := range r.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != "" && t.Type != "custom" {
			continue
		}
		if t.Name == "" {
			return badRequest(param+".name", "%s.name is missing", param)
		}
		schema := bytes.TrimSpace(t.InputSchema)
		if isNull(schema) {
			schema = []byte(`{"type":"object","properties":{}}`)
		} else if schema[0] != '{' {
			return badRequest(param+".input_schema", "%s.input_schema must be a JSON Schema object", param)
		}
		var b bytes.Buffer
		b.WriteString(`{"type":"function","function":{"name":`)
		b.Write(jsonString(t.Name))
		if t.Description != nil {
			b.WriteString(`,"description":`)
			b.Write(jsonString(*t.Description))
		}
		b.WriteString(`,"parameters":`)
		b.Write(schema)
		b.WriteString(`}}`)
		req.Tools = append(req.Tools, json.RawMessage(b.Bytes()))
	}
	return nil
}

func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func (c *converter) toolChoice(r *messagesRequest, req *server.ChatRequest) error {
	tc := r.ToolChoice
	if tc == nil {
		req.ToolChoice = server.ToolAuto
		return nil
	}
	req.ParallelToolCalls = !tc.DisableParallelToolUse
	switch tc.Type {
	case "auto", "":
		req.ToolChoice = server.ToolAuto
	case "any":
		req.ToolChoice = server.ToolRequired
	case "none":
		req.ToolChoice = server.ToolNone
	case "tool":
		if tc.Name == "" {
			return badRequest("tool_choice.name", "tool_choice {\"type\":\"tool\"} needs the tool's name")
		}
		req.ToolChoice, req.ToolName = server.ToolNamed, tc.Name
	default:
		return badRequest("tool_choice.type", "tool_choice.type %q: expected auto, any, tool or none", tc.Type)
	}
	return nil
}

// thinking maps thinking.type onto enable_thinking. budget_tokens is
// accepted and not enforced (the model ends its reasoning itself);
// adaptive leaves the choice to the server's default. output_config.effort
// (low, medium, high, max) is the level a Qwen3.8 template's
// reasoning_effort gets (chattemplate.Features); it does not turn thinking
// on or off, and other templates ignore it.
func (c *converter) thinking(r *messagesRequest, req *server.ChatRequest) error {
	if r.OutputConfig != nil && r.OutputConfig.Effort != nil {
		switch e := *r.OutputConfig.Effort; e {
		case "low", "medium", "high", "max":
			req.ReasoningEffort, req.EffortParam = e, "output_config.effort"
		default:
			return badRequest("output_config.effort", "output_config.effort %q: expected low, medium, high or max", e)
		}
	}
	if r.Thinking == nil {
		return nil
	}
	switch r.Thinking.Type {
	case "enabled", "disabled":
		on := r.Thinking.Type == "enabled"
		req.Thinking = &on
	case "adaptive":
	default:
		return badRequest("thinking.type", "thinking.type %q: expected enabled, disabled or adaptive", r.Thinking.Type)
	}
	if b := r.Thinking.BudgetTokens; b != nil && *b < 0 {
		return badRequest("thinking.budget_tokens", "thinking.budget_tokens must not be negative, got %d", *b)
	}
	return nil
}

func (c *converter) sampling(r *messagesRequest, req *server.ChatRequest) error {
	p := c.defaults
	if r.Temperature != nil {
		p.Temperature = *r.Temperature
		if p.Temperature > 0 && c.defaults.Temperature == 0 {
			p.TopP = 1 // the model's greedy default carries no nucleus setting
		}
	}
	if r.TopP != nil {
		p.TopP = *r.TopP
	}
	if r.TopK != nil {
		k, err := server.TopK(*r.TopK, "top_k")
		if err != nil {
			return err
		}
		p.TopK = k
	}
	if p.Seed == 0 { // Anthropic has no seed; nonzero is serve --seed's default
		p.Seed = rand.Uint64()
	}
	if err := p.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), "sample: ")
		return badRequest(strings.Fields(msg)[0], "%s", msg)
	}
	req.Sampling = p
	return nil
}

func (c *converter) stops(r *messagesRequest, req *server.ChatRequest) error {
	if len(r.StopSequences) > maxStops {
		return badRequest("stop_sequences", "stop_sequences has %d strings; at most %d are allowed", len(r.StopSequences), maxStops)
	}
	for i, s := range r.StopSequences {
		if len(s) > maxStopBytes {
			return badRequest("stop_sequences", "stop_sequences[%d] is %d bytes; at most %d are allowed", i, len(s), maxStopBytes)
		}
	}
	req.Stop = r.StopSequences
	return nil
}

// maxTokens is required, as Anthropic requires it; the core lowers it to
// what fits the context (ClampMaxTokens) rather than refusing.
func (c *converter) maxTokens(r *messagesRequest, req *server.ChatRequest) error {
	if r.MaxTokens == nil {
		if c.counting {
			return nil
		}
		return badRequest("max_tokens", "max_tokens: field required")
	}
	if *r.MaxTokens < 1 {
		return badRequest("max_tokens", "max_tokens must be at least 1, got %d", *r.MaxTokens)
	}
	req.MaxTokens = *r.MaxTokens
	return nil
}

// outputFormat compiles structured outputs ({"type":"json_schema",
// "schema":{…}}, at output_format or output_config.format) into the core's
// Format; a schema that does not compile is a 400 naming what is wrong.
func (c *converter) outputFormat(r *messagesRequest, req *server.ChatRequest) error {
	raw, param := r.OutputFormat, "output_format"
	if r.OutputConfig != nil && !isNull(r.OutputConfig.Format) {
		if !isNull(raw) {
			return badRequest("output_format", "give output_format or output_config.format, not both")
		}
		raw, param = r.OutputConfig.Format, "output_config.format"
	}
	if isNull(raw) {
		return nil
	}
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return badRequest(param, "%s must be {\"type\":\"json_schema\",\"schema\":{…}}", param)
	}
	if f.Type != "json_schema" {
		return badRequest(param+".type", "%s.type %q: expected json_schema", param, f.Type)
	}
	if isNull(f.Schema) {
		return badRequest(param+".schema", "%s.schema is missing", param)
	}
	opts, err := server.FormatOptions(r.FormatLimits)
	if err != nil {
		return badRequest(server.FormatLimitsField, "%v", err)
	}
	s, err := jsonconstrain.CompileCached(f.Schema, opts)
	if err != nil {
		return badRequest(param+".schema", "%s.schema: %v", param, err)
	}
	req.Format = s
	return nil
}
