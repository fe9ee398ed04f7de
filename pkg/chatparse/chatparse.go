// Package chatparse splits a model's generated text into reasoning, answer
// text and tool calls (the Qwen3-Coder XML dialect the Qwen3.5/3.6
// templates ask for), incrementally as tokens arrive.
//
// This file fixes the API the server builds on; the parser behind it is
// filled in by the tool-call work of issue #14.
package chatparse

import "encoding/json"

// Kind says what an Event carries.
type Kind int

const (
	Content       Kind = iota // Text is answer text
	Reasoning                 // Text is reasoning (between <think> and </think>)
	ToolCallStart             // a new call: Index, ID, Name
	ToolCallArgs              // Index, Text: a fragment of the call's JSON arguments
)

// Event is one piece of parsed output. The ToolCallArgs fragments of a call,
// concatenated, are exactly that call's Arguments in the final result.
type Event struct {
	Kind  Kind
	Text  string
	Index int    // tool calls: 0, 1, … in order of appearance
	ID    string // ToolCallStart: "call_…"
	Name  string // ToolCallStart: the function name
}

// Tool is what the parser needs of a tool definition: its name and the JSON
// schema of its parameters (values are typed by it: a "string" parameter
// stays a string, others are decoded as JSON or Python literals).
type Tool struct {
	Name       string
	Parameters json.RawMessage
}

// Options configures a Parser.
type Options struct {
	// InReasoning is true when the prompt ended inside <think> (thinking
	// on): output is reasoning until </think>.
	InReasoning bool
	Tools       []Tool
	// NewID makes tool-call ids; default "call_" + random hex.
	NewID func() string
}

// ToolCall is one complete call.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // a JSON object
}

// Result is the whole parsed output.
type Result struct {
	Content   string
	Reasoning string
	ToolCalls []ToolCall
}

// Parser consumes generated text piece by piece.
type Parser struct {
	opt Options
	res Result
}

// New returns a parser.
func New(opt Options) *Parser { return &Parser{opt: opt} }

// Push consumes the next piece of text (whole UTF-8 characters) and returns
// the events that became certain. Text that may still turn out to be markup
// is held back until it can be classified.
func (p *Parser) Push(text string) []Event {
	p.res.Content += text
	return []Event{{Kind: Content, Text: text}}
}

// Finish is called at the end of generation: it flushes what was held back
// (an unclosed call is completed as far as it parsed) and returns the last
// events.
func (p *Parser) Finish() []Event { return nil }

// Result is everything parsed so far.
func (p *Parser) Result() Result { return p.res }
