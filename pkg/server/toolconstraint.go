package server

import (
	"fmt"
	"os"
	"sync"

	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/tokenizer"
	"github.com/nvmai/nvmai/pkg/toolconstrain"
)

// toolPlan is the tool-call constraint of req's generation, nil when it
// has none: no tools, a structured-output Format (which already rules the
// markup out), or the constraint turned off for the server or the request.
// A tool list the constraint cannot carry leaves the calls unconstrained,
// said once in the log; so does each parameter whose schema it cannot
// enforce (that value alone is left free). Neither is the client's error:
// tool schemas are not a response_format.
func (s *Server) toolPlan(req *ChatRequest) *toolconstrain.Plan {
	if s.cfg.NoToolConstraint || req.NoToolConstraint || req.Format != nil || len(req.Tools) == 0 {
		return nil
	}
	var tools []toolconstrain.Tool
	for _, t := range parserTools(req.Tools) {
		tools = append(tools, toolconstrain.Tool{Name: t.Name, Parameters: t.Parameters})
	}
	g, err := toolconstrain.Compile(tools)
	if err != nil {
		s.noteOnce("tool calls are not constrained: %v", err)
		return nil
	}
	for _, f := range g.Fallbacks {
		s.noteOnce("tool call constraint: the value of %s; that value is left unconstrained", f)
	}
	p := &toolconstrain.Plan{Grammar: g, Parallel: req.ParallelToolCalls}
	switch req.ToolChoice {
	case ToolNone:
		p.Choice = toolconstrain.None
	case ToolRequired:
		p.Choice = toolconstrain.Required
	case ToolNamed:
		if !g.HasTool(req.ToolName) {
			s.noteOnce("tool calls are not constrained: tool_choice names %q, whose name the call format cannot carry", req.ToolName)
			return nil
		}
		p.Choice, p.Name = toolconstrain.Named, req.ToolName
	default:
		p.Choice = toolconstrain.Auto
	}
	return p
}

// noted are the notices already given, so that an agent sending the same
// tools every turn is told once.
var noted sync.Map

func (s *Server) noteOnce(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if _, seen := noted.LoadOrStore(msg, true); !seen {
		s.note("%s", msg)
	}
}

// toolVocab is an engine's tool-call constraint tables, built on its first
// request with tools.
type toolVocab struct {
	v   *toolconstrain.Vocab
	err error
}

// toolConstraint returns p's constraint, or nil (calls unconstrained, said
// once on stderr) when this vocabulary cannot have one. The caller holds
// the engine's lock, and f.masker has been built.
func (f *formatMasker) toolConstraint(tok *tokenizer.Tokenizer, ends []int, p *toolconstrain.Plan) runtime.Constraint {
	err := f.err
	if err == nil && f.tools.v == nil && f.tools.err == nil {
		f.tools.v, f.tools.err = toolconstrain.NewVocab(tok, ends, f.masker)
	}
	if err == nil {
		err = f.tools.err
	}
	var c *toolconstrain.Constraint
	if err == nil {
		c, err = f.tools.v.Constrain(*p)
	}
	if err != nil {
		if _, seen := noted.LoadOrStore("engine: "+err.Error(), true); !seen {
			fmt.Fprintf(os.Stderr, "nvmai-run serve: tool calls are not constrained: %v\n", err)
		}
		return nil
	}
	return c
}
