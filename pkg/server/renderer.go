package server

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// CheckedRenderer returns tmpl when it renders a one-message conversation
// (or tmplErr is nil), else the built-in ChatML renderer when e's template
// is the plain ChatML one, else an error saying what to do.
func CheckedRenderer(e *runtime.Engine, tmpl *chattemplate.Template, tmplErr error) (Renderer, error) {
	err := tmplErr
	if err == nil {
		if _, err = tmpl.Render(chattemplate.Input{Messages: []chattemplate.Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true}); err == nil {
			return tmpl, nil
		}
	}
	if e.Tokenizer.UsesPlainChatTemplate() {
		return PlainChatML{}, nil
	}
	return nil, fmt.Errorf("the chat template cannot be used (%v); give one with --chat-template FILE", err)
}

// InstallRenderer is the chat template of the install e was loaded from.
func InstallRenderer(e *runtime.Engine) (Renderer, error) {
	tmpl, err := chattemplate.Load(e.Install.Dir)
	return CheckedRenderer(e, tmpl, err)
}
