package server

import (
	"bytes"
	"encoding/json"
)

// ToolChoiceSyntax is how a protocol writes a named tool choice.
type ToolChoiceSyntax int

const (
	// ToolChoiceChat is chat completions': {"type":"function","function":{"name":…}}.
	ToolChoiceChat ToolChoiceSyntax = iota
	// ToolChoiceFlat is Responses': {"type":"function","name":…}, the chat
	// form accepted too. A choice of another type (a hosted tool, which is
	// skipped, or allowed_tools) falls back to auto.
	ToolChoiceFlat
)

// ParseToolChoice decodes an OpenAI-style tool_choice: absent or null is
// auto; "auto", "none" and "required"; or a named function in the
// protocol's syntax. A bad value is a KindInvalid error naming the field.
func ParseToolChoice(raw json.RawMessage, syntax ToolChoiceSyntax) (ToolChoiceMode, string, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return ToolAuto, "", nil
	}
	named := `{"type":"function","function":{"name":…}}`
	if syntax == ToolChoiceFlat {
		named = `{"type":"function","name":…}`
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch m := ToolChoiceMode(s); m {
		case ToolAuto, ToolNone, ToolRequired:
			return m, "", nil
		}
		return "", "", invalid("tool_choice", "tool_choice %q: expected auto, none, required or %s", s, named)
	}
	var obj struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	err := json.Unmarshal(raw, &obj)
	if syntax == ToolChoiceChat {
		if err != nil || obj.Function == nil || obj.Function.Name == "" {
			return "", "", invalid("tool_choice", "tool_choice: expected auto, none, required or %s", named)
		}
		return ToolNamed, obj.Function.Name, nil
	}
	if err != nil {
		return "", "", invalid("tool_choice", "tool_choice: expected a string or an object")
	}
	if obj.Type != "function" {
		return ToolAuto, "", nil
	}
	name := obj.Name
	if name == "" && obj.Function != nil {
		name = obj.Function.Name
	}
	if name == "" {
		return "", "", invalid("tool_choice.name", "tool_choice of type function needs a name")
	}
	return ToolNamed, name, nil
}
