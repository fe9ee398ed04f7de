// Package chattemplate renders a conversation into the prompt text a model
// was trained on, with the install's own Jinja chat template, exactly as
// transformers' apply_chat_template does.
//
// This file fixes the API the server and the CLI build on; the rendering
// engine behind it is filled in by the template work of issue #14.
package chattemplate

import (
	"encoding/json"
	"fmt"
)

// Message is one turn of a conversation as the template sees it.
type Message struct {
	Role string // system, user, assistant, tool
	// Content is the text. When Parts is non-nil the template receives the
	// list of parts instead (as an OpenAI client sent it).
	Content string
	Parts   []Part
	// ReasoningContent is an assistant turn's reasoning, nil when the client
	// sent none (the template then splits it out of Content).
	ReasoningContent *string
	ToolCalls        []ToolCall
	ToolCallID       string // tool: the call this result answers
	Name             string // tool: the function's name, when given
}

// Part is one item of a list-valued content.
type Part struct {
	Type string // "text" (others are refused before rendering)
	Text string
}

// ToolCall is a call an assistant turn made.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the call's arguments as a JSON object, in the client's key
	// order (an OpenAI client's JSON-string arguments decoded first). A value
	// that is not an object is passed to the template as a string.
	Arguments json.RawMessage
}

// Input is everything a render depends on.
type Input struct {
	Messages []Message
	// Tools are the client's tool objects ({"type":"function","function":{…}}),
	// raw so that tojson keeps the client's key order.
	Tools               []json.RawMessage
	AddGenerationPrompt bool
	// Kwargs are extra template variables (chat_template_kwargs):
	// enable_thinking, preserve_thinking, … with encoding/json values.
	Kwargs map[string]any
}

// Template is a parsed chat template.
type Template struct {
	source string
}

// RenderError is a failure of the template itself (raise_exception, a type
// error): the request is at fault, so servers answer it with 400.
type RenderError struct{ Msg string }

func (e *RenderError) Error() string { return "chat template: " + e.Msg }

// Parse compiles a template's source.
func Parse(source string) (*Template, error) {
	return &Template{source: source}, nil
}

// Load reads an install's (or snapshot's) template: chat_template.jinja when
// present, else tokenizer_config.json's chat_template, as transformers does.
func Load(dir string) (*Template, error) {
	return nil, fmt.Errorf("chattemplate: Load(%s): not implemented yet", dir)
}

// Source is the template text.
func (t *Template) Source() string { return t.source }

// SHA256 is the hex sha256 of the template text (prompt caches key on it).
func (t *Template) SHA256() string { return "" }

// Render renders in. A *RenderError means the conversation is at fault.
func (t *Template) Render(in Input) (string, error) {
	return "", &RenderError{Msg: "rendering is not implemented yet"}
}
