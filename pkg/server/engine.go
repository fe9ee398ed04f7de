// Package server is the protocol-independent core of nvmai's HTTP server:
// one request type per kind of work (chat, raw completion), one
// generation loop that applies stop strings and parses reasoning and tool
// calls, and a FIFO queue that runs one generation at a time. Protocol
// adapters (pkg/server/openai; later Anthropic and Responses) decode their
// wire format into these types and encode the results; tests drive the
// core with a scripted Engine instead of a model.
package server

import (
	"context"
	"time"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/toolconstrain"
)

// Engine generates tokens. Calls are serialized by the server's queue.
type Engine interface {
	Info() ModelInfo
	// Tokenize turns prompt text into token ids (added tokens typed in the
	// text become control tokens, as transformers' apply_chat_template
	// does). It stops once the text has more than limit tokens and reports
	// truncated, ids then being only a prefix, so that a huge prompt costs
	// no more than the context it is checked against; under the limit ids
	// are the whole encoding.
	Tokenize(text string, limit int) (ids []int, truncated bool)
	// Generate prefills g.Prompt (reusing what it can) and generates,
	// calling onToken with each token's text (whole UTF-8 characters; the
	// text of an end-of-sequence token is not passed). onToken returning
	// false ends generation with FinishStopped. It returns ctx's error
	// within one prefill chunk or decode step of ctx ending.
	Generate(ctx context.Context, g Generation, onToken func(text string) bool) (Outcome, error)
}

// ModelInfo describes the loaded model.
type ModelInfo struct {
	ID       string
	Context  int           // most tokens of prompt + output
	Sampling sample.Params // the model's defaults (generation_config.json)
	Budget   string        // expert-cache budget, for the ready line
}

// Generation is one request to the engine.
type Generation struct {
	Prompt    []int
	MaxTokens int
	Sampling  sample.Params
	// Format constrains the output to a JSON document (nil: free text) by
	// masking the logits at every step; the engine ends generation once
	// the document is complete. FormatAfterThink: the prompt opened a
	// <think> block, so the reasoning stays free and the constraint starts
	// after the model's </think>.
	Format           *jsonconstrain.Schema
	FormatAfterThink bool
	// Tools, when set (and Format is not), constrains tool calls: free
	// text passes, and once the model opens a call only a well-formed
	// call of a declared tool can follow (pkg/toolconstrain).
	Tools *toolconstrain.Plan
}

// Finish says why generation ended.
type Finish string

const (
	FinishEOS     Finish = "eos"     // an end-of-sequence token
	FinishLength  Finish = "length"  // MaxTokens or the context
	FinishStopped Finish = "stopped" // onToken said stop
)

// Outcome is what a generation did.
type Outcome struct {
	Finish           Finish
	CachedTokens     int // prompt tokens reused from the prompt cache
	CompletionTokens int
	Prefill          time.Duration
	Decode           time.Duration
	FirstToken       time.Duration // from the start of Generate to the first token
	// Callbacks is the part of Decode spent in onToken (stop strings,
	// parsing, encoding and writing the response): the server's own cost
	// per token on top of the model's.
	Callbacks time.Duration
}

// Renderer turns a conversation into prompt text (the model's chat
// template). A *chattemplate.RenderError means the request is at fault.
type Renderer interface {
	Render(in chattemplate.Input) (string, error)
}
