package responses

import (
	"encoding/json"

	"github.com/nvmai/nvmai/pkg/server"
)

// responseJSON is the Response object (non-stream body, and the payload of
// response.created / in_progress / completed / incomplete / failed).
type responseJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Error              *errorJSON        `json:"error"`
	IncompleteDetails  *incompleteJSON   `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []outputItem      `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          reasoningConfig   `json:"reasoning"`
	Store              bool              `json:"store"`
	Temperature        *float64          `json:"temperature"`
	Text               textConfig        `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	TopP               *float64          `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *usageJSON        `json:"usage"`
	Metadata           map[string]string `json:"metadata"`
}

type errorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteJSON struct {
	Reason string `json:"reason"`
}

type reasoningConfig struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

type textConfig struct {
	Format json.RawMessage `json:"format"`
}

type usageJSON struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func usage(u server.Usage, reasoningTokens int) *usageJSON {
	j := &usageJSON{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	j.InputTokensDetails.CachedTokens = u.CachedTokens
	j.OutputTokensDetails.ReasoningTokens = min(reasoningTokens, u.CompletionTokens)
	return j
}

// outputItem is one element of output: a reasoning item, an assistant
// message or a function call (the fields of the others are omitted).
type outputItem struct {
	ID     string `json:"id"`
	Type   string `json:"type"` // reasoning, message, function_call
	Status string `json:"status,omitempty"`
	// message
	Role    string      `json:"role,omitempty"`
	Content *[]partJSON `json:"content,omitempty"` // a message's is always present
	// reasoning: summary is always present (clients require it), content
	// carries the model's reasoning text.
	Summary *[]partJSON `json:"summary,omitempty"`
	// function_call
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

type partJSON struct {
	Type        string    `json:"type"` // output_text, reasoning_text
	Text        string    `json:"text"`
	Annotations *[]string `json:"annotations,omitempty"`
	Logprobs    *[]string `json:"logprobs,omitempty"`
}

func outputTextPart(text string) partJSON {
	return partJSON{Type: "output_text", Text: text, Annotations: &[]string{}, Logprobs: &[]string{}}
}

func reasoningItem(id, text string, done bool) outputItem {
	it := outputItem{ID: id, Type: "reasoning", Summary: &[]partJSON{}}
	if done {
		it.Content = &[]partJSON{{Type: "reasoning_text", Text: text}}
	}
	return it
}

func messageItem(id, text string, done bool) outputItem {
	it := outputItem{ID: id, Type: "message", Role: "assistant", Status: "in_progress", Content: &[]partJSON{}}
	if done {
		it.Status, it.Content = "completed", &[]partJSON{outputTextPart(text)}
	}
	return it
}

func callItem(id, callID, name, args string, done bool) outputItem {
	it := outputItem{ID: id, Type: "function_call", Status: "in_progress", CallID: callID, Name: name, Arguments: &args}
	if done {
		it.Status = "completed"
		if args == "" {
			a := "{}"
			it.Arguments = &a
		}
	}
	return it
}

// status maps the core's finish onto a Response status and, for
// incomplete, its reason.
func status(finish string) (string, *incompleteJSON) {
	if finish == "length" {
		return "incomplete", &incompleteJSON{Reason: "max_output_tokens"}
	}
	return "completed", nil
}
