//go:build nvmai_scripted

package scripted

import (
	"encoding/json"
	"slices"
	"strings"
)

// conversation is what the engine reads back from a rendered Qwen-style
// ChatML prompt (the Qwen3.5/3.6 templates and servertest.Renderer).
type conversation struct {
	tools          []string // function names in the <tools> block
	lastUser       string
	toolResults    int // <tool_response> blocks after the last user message
	lastToolOutput string
	thinking       bool // the prompt opens a think block
}

func (c conversation) offers(name string) bool { return slices.Contains(c.tools, name) }

const (
	userTurn     = "<|im_start|>user\n"
	toolResponse = "<tool_response>\n"
)

func readPrompt(p string) conversation {
	c := conversation{tools: toolNames(p), thinking: strings.HasSuffix(p, "<think>\n")}
	// The last user turn that is a question, not tool results.
	rest := p
	for {
		i := strings.LastIndex(rest, userTurn)
		if i < 0 {
			rest = p
			break
		}
		if !strings.HasPrefix(p[i+len(userTurn):], toolResponse) {
			body := p[i+len(userTurn):]
			if end := strings.Index(body, "<|im_end|>"); end >= 0 {
				c.lastUser = body[:end]
			}
			rest = body
			break
		}
		rest = p[:i]
	}
	c.toolResults = strings.Count(rest, toolResponse)
	if i := strings.LastIndex(rest, toolResponse); i >= 0 {
		out := rest[i+len(toolResponse):]
		if end := strings.Index(out, "\n</tool_response>"); end >= 0 {
			out = out[:end]
		}
		c.lastToolOutput = out
	}
	return c
}

// toolNames lists the functions of the prompt's <tools> block: one JSON
// object per line, {"type":"function","function":{"name":…}} or flat.
func toolNames(p string) []string {
	start := strings.Index(p, "<tools>")
	if start < 0 {
		return nil
	}
	block := p[start+len("<tools>"):]
	if end := strings.Index(block, "</tools>"); end >= 0 {
		block = block[:end]
	}
	var names []string
	for _, line := range strings.Split(block, "\n") {
		var t struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(line)), &t) != nil {
			continue
		}
		if t.Function.Name != "" {
			names = append(names, t.Function.Name)
		} else if t.Name != "" {
			names = append(names, t.Name)
		}
	}
	return names
}
