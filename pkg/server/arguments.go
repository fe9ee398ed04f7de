package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ToolArguments returns a history tool call's arguments as the JSON object
// the chat template iterates. OpenAI and Responses send them as a string
// holding the object, Anthropic as the object itself; both forms are taken,
// and absent, null or blank arguments are {}. Anything else (a string that
// is not JSON, a JSON array or number) is refused naming param, as the
// template would fail on it with a message that names no field (#44 S13).
func ToolArguments(raw json.RawMessage, param string) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage("{}"), nil
	}
	if t[0] == '{' {
		return t, nil // the request decoder has already checked it is valid JSON
	}
	var s string
	if t[0] != '"' || json.Unmarshal(t, &s) != nil {
		return nil, notObject(param, "it is a JSON "+jsonKind(t))
	}
	st := strings.TrimSpace(s)
	if st == "" {
		return json.RawMessage("{}"), nil
	}
	var v json.RawMessage
	if err := json.Unmarshal([]byte(st), &v); err != nil {
		return nil, notObject(param, fmt.Sprintf("it is a string that is not valid JSON: %v", err))
	}
	if st[0] != '{' {
		return nil, notObject(param, "it is a string holding a JSON "+jsonKind([]byte(st)))
	}
	return json.RawMessage(st), nil
}

func notObject(param, why string) *Error {
	return invalid(param, "%s is not a JSON object (%s); a tool call's arguments must be a JSON object, or a string holding one", param, why)
}

// jsonKind names the kind of the valid JSON value v.
func jsonKind(v []byte) string {
	switch v[0] {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}
