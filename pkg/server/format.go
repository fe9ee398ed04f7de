package server

import (
	"fmt"
	"math"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// formatMasker is a RuntimeEngine's structured-output state: the Masker
// over its vocabulary, built on the first request with a Format (a 248k
// vocabulary takes about a second) and shared by every later one.
type formatMasker struct {
	masker   *jsonconstrain.Masker
	err      error
	thinkEnd int // </think>, -1 when the vocabulary has none
	tools    toolVocab
}

// constraint returns the runtime hook for g, nil when g has no Format.
// The caller holds the engine's lock.
func (f *formatMasker) constraint(tok *tokenizer.Tokenizer, ends []int, g Generation) (runtime.Constraint, error) {
	if g.Format == nil && g.Tools == nil {
		return nil, nil
	}
	if f.masker == nil && f.err == nil {
		f.masker, f.err = jsonconstrain.NewMasker(tok, ends)
		f.thinkEnd = -1
		if id, ok := tok.TokenID("</think>"); ok {
			f.thinkEnd = id
		}
	}
	if g.Format == nil {
		return f.toolConstraint(tok, ends, g.Tools), nil
	}
	if f.err != nil {
		return nil, fmt.Errorf("structured output: %w", f.err)
	}
	c := f.masker.Constrain(g.Format)
	if !g.FormatAfterThink {
		return c, nil
	}
	if f.thinkEnd < 0 {
		return nil, fmt.Errorf("structured output after reasoning needs a </think> token, which this model's vocabulary lacks; turn thinking off for the request")
	}
	return &afterThink{json: c, thinkEnd: f.thinkEnd, ends: ends, thinking: true}, nil
}

// afterThink leaves the reasoning free and applies the JSON constraint
// from the token after the model's </think>. End tokens are refused while
// it reasons, so a reply cannot end without its document.
type afterThink struct {
	json     *jsonconstrain.Constraint
	thinkEnd int
	ends     []int
	thinking bool
}

func (a *afterThink) Mask(logits []float32) int {
	if !a.thinking {
		return a.json.Mask(logits)
	}
	allowed := len(logits)
	for _, id := range a.ends {
		if id >= 0 && id < len(logits) {
			logits[id] = float32(math.Inf(-1))
			allowed--
		}
	}
	return allowed
}

func (a *afterThink) Advance(id int) (bool, error) {
	if !a.thinking {
		return a.json.Advance(id)
	}
	a.thinking = id != a.thinkEnd
	return false, nil
}

// formatRequest settles how a Format combines with the rest of req: a
// forced tool call contradicts it (400); with tool_choice auto the Format
// wins, so the tools are not offered (tool_choice none), since the mask
// would refuse the call markup anyway. Stop strings are dropped: cutting a
// document short would break it. req itself is not changed.
func formatRequest(req *ChatRequest) (*ChatRequest, error) {
	if req.Format == nil {
		return req, nil
	}
	switch req.ToolChoice {
	case ToolRequired, ToolNamed:
		return nil, invalid("tool_choice", "tool_choice %q forces a tool call, which a structured-output request cannot return; send tool_choice \"auto\" or \"none\", or drop the output format", req.ToolChoice)
	}
	r := *req
	r.ToolChoice, r.Stop = ToolNone, nil
	return &r, nil
}
