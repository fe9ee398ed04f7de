package server

import (
	"strings"

	"github.com/nvmai/nvmai/pkg/chattemplate"
)

// PlainChatML renders exactly tokenizer.PlainChatTemplate (ChatML turns, an
// open assistant turn): the fallback for installs whose template is that
// plain one, such as the test fixtures, when no Jinja engine is available.
type PlainChatML struct{}

// Render implements Renderer.
func (PlainChatML) Render(in chattemplate.Input) (string, error) {
	if len(in.Tools) > 0 {
		return "", &chattemplate.RenderError{Msg: "this model's chat template (plain ChatML) cannot express tools"}
	}
	var b strings.Builder
	for _, m := range in.Messages {
		if len(m.ToolCalls) > 0 {
			return "", &chattemplate.RenderError{Msg: "this model's chat template (plain ChatML) cannot express tool calls"}
		}
		text := m.Content
		if m.Parts != nil {
			var s strings.Builder
			for _, p := range m.Parts {
				s.WriteString(p.Text)
			}
			text = s.String()
		}
		b.WriteString("<|im_start|>" + m.Role + "\n" + text + "<|im_end|>\n")
	}
	if in.AddGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}
