package chattemplate

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// InputError is a malformed conversation (the request is at fault: 400). It
// names the field, e.g. messages[3].tool_calls[0].function.arguments.
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

// openAIMessage is one element of an OpenAI chat-completions messages array.
// Fields are raw so that null, absent and mistyped values can be told apart.
type openAIMessage struct {
	Role             json.RawMessage `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	Reasoning        json.RawMessage `json:"reasoning"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	ToolCallID       json.RawMessage `json:"tool_call_id"`
	Name             json.RawMessage `json:"name"`
}

type openAIToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// FromOpenAIMessages converts an OpenAI chat-completions "messages" array
// into template messages, changing only what the template cannot take as
// a client sends it:
//   - roles pass through unchanged (developer stays developer; mapping it is
//     the caller's policy);
//   - content is a string, null/absent (ContentNull), or a list of
//     {"type":"text"} parts (any other part type is an *InputError);
//   - reasoning_content, else reasoning, becomes ReasoningContent;
//   - tool_calls[].function.arguments, a JSON string, is decoded when it
//     holds a JSON object (key order kept); an empty string means no
//     arguments; any other string stays a string, and an object sent as an
//     object is kept as is.
//
// Errors are *InputError naming the field.
func FromOpenAIMessages(raw json.RawMessage) ([]Message, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return nil, &InputError{Field: "messages", Msg: "must be an array of message objects"}
	}
	out := make([]Message, len(items))
	for i, item := range items {
		field := fmt.Sprintf("messages[%d]", i)
		var m openAIMessage
		if err := json.Unmarshal(item, &m); err != nil {
			return nil, &InputError{Field: field, Msg: "must be an object with string fields: " + err.Error()}
		}
		msg, err := m.convert(field)
		if err != nil {
			return nil, err
		}
		out[i] = msg
	}
	return out, nil
}

func (m *openAIMessage) convert(field string) (Message, error) {
	var msg Message
	var err error
	if msg.Role, err = requiredString(m.Role, field+".role"); err != nil {
		return msg, err
	}
	if err := m.content(&msg, field+".content"); err != nil {
		return msg, err
	}
	for _, r := range []struct {
		raw  json.RawMessage
		name string
	}{{m.ReasoningContent, ".reasoning_content"}, {m.Reasoning, ".reasoning"}} {
		s, ok, err := optionalString(r.raw, field+r.name)
		if err != nil {
			return msg, err
		}
		if ok {
			msg.ReasoningContent = &s
			break
		}
	}
	if msg.ToolCallID, _, err = optionalString(m.ToolCallID, field+".tool_call_id"); err != nil {
		return msg, err
	}
	if msg.Name, _, err = optionalString(m.Name, field+".name"); err != nil {
		return msg, err
	}
	msg.ToolCalls, err = toolCalls(m.ToolCalls, field+".tool_calls")
	return msg, err
}

func (m *openAIMessage) content(msg *Message, field string) error {
	if isNull(m.Content) {
		msg.ContentNull = true
		return nil
	}
	if err := json.Unmarshal(m.Content, &msg.Content); err == nil {
		return nil
	}
	var parts []map[string]json.RawMessage
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return &InputError{Field: field, Msg: "must be a string, null or an array of content parts"}
	}
	msg.Parts = make([]Part, len(parts))
	for j, p := range parts {
		pf := fmt.Sprintf("%s[%d]", field, j)
		typ, err := requiredString(p["type"], pf+".type")
		if err != nil {
			return err
		}
		if typ != "text" {
			return &InputError{Field: pf + ".type", Msg: fmt.Sprintf("part type %q is not supported: this model reads text only", typ)}
		}
		text, err := requiredString(p["text"], pf+".text")
		if err != nil {
			return err
		}
		msg.Parts[j] = Part{Type: typ, Text: text}
	}
	return nil
}

func toolCalls(raw json.RawMessage, field string) ([]ToolCall, error) {
	if isNull(raw) {
		return nil, nil
	}
	var calls []openAIToolCall
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, &InputError{Field: field, Msg: "must be an array of {id, type, function: {name, arguments}}: " + err.Error()}
	}
	out := make([]ToolCall, len(calls))
	for i, c := range calls {
		out[i] = ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: decodeArguments(c.Function.Arguments)}
	}
	return out, nil
}

// decodeArguments turns OpenAI's JSON-string arguments into the object they
// hold. A string that is not a JSON object stays the string it is.
func decodeArguments(raw json.RawMessage) json.RawMessage {
	if isNull(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return raw // an object (or another value) sent as is
	}
	inner := bytes.TrimSpace([]byte(s))
	if len(inner) == 0 {
		return nil // "" is how some clients say "no arguments"
	}
	if len(inner) > 0 && inner[0] == '{' && json.Valid(inner) {
		return json.RawMessage(inner)
	}
	return raw
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

func requiredString(raw json.RawMessage, field string) (string, error) {
	s, ok, err := optionalString(raw, field)
	if err == nil && !ok {
		err = &InputError{Field: field, Msg: "is required"}
	}
	return s, err
}

func optionalString(raw json.RawMessage, field string) (string, bool, error) {
	if isNull(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, &InputError{Field: field, Msg: "must be a string"}
	}
	return s, true, nil
}
