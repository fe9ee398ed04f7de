package tokenizer

import "strings"

// Message is one turn of a conversation.
type Message struct {
	Role    string // "system", "user" or "assistant"
	Content string
}

// PlainChatTemplate is the Jinja chat template that ChatPrompt implements,
// character for character as the fixture snapshots' tokenizer_config.json
// carries it: ChatML turns and, on request, an open assistant turn with
// nothing after its header.
const PlainChatTemplate = "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"

// ChatPrompt formats messages as Qwen's ChatML:
//
//	<|im_start|>{role}\n{content}<|im_end|>\n   for each message, then
//	<|im_start|>assistant\n                     if addGenerationPrompt.
//
// This is exactly what PlainChatTemplate renders. The official Qwen3-family
// templates do more, and ChatPrompt does none of it: they render tool
// definitions into the system turn, strip the <think>…</think> reasoning of
// earlier assistant turns, wrap tool calls and tool responses, and after the
// assistant header may add "<think>\n\n</think>\n\n" (thinking disabled) or
// "<think>\n". Callers that need those must add the text themselves; use
// Tokenizer.UsesPlainChatTemplate to tell whether a model's own template is
// the plain one.
func ChatPrompt(messages []Message, addGenerationPrompt bool) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteString("\n")
		b.WriteString(m.Content)
		b.WriteString("<|im_end|>\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// EncodeChat is Encode(ChatPrompt(messages, addGenerationPrompt)). Added
// tokens typed inside message contents are matched as tokens too, as
// transformers' apply_chat_template(tokenize=True) does.
func (t *Tokenizer) EncodeChat(messages []Message, addGenerationPrompt bool) []int {
	return t.Encode(ChatPrompt(messages, addGenerationPrompt))
}

// UsesPlainChatTemplate reports whether tokenizer_config.json's chat
// template is PlainChatTemplate, so that ChatPrompt formats conversations
// exactly as the model's own template would.
func (t *Tokenizer) UsesPlainChatTemplate() bool {
	return strings.TrimSpace(t.chatTemplate) == PlainChatTemplate
}
