package jsonconstrain

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ResponseFormatError is a response_format the server must answer with
// 400 invalid_request_error; Param names the request field at fault.
type ResponseFormatError struct {
	Param string // e.g. "response_format.json_schema.schema"
	Err   error  // a *SchemaError for a schema that does not compile
}

func (e *ResponseFormatError) Error() string { return e.Param + ": " + e.Err.Error() }
func (e *ResponseFormatError) Unwrap() error { return e.Err }

// FromResponseFormat reads an OpenAI chat-completions response_format:
// {"type":"text"} (or an absent/null field) gives nil, no constraint;
// {"type":"json_object"} gives ObjectMode; {"type":"json_schema",
// "json_schema":{"name":…,"schema":{…},"strict":…}} compiles the schema.
// strict is accepted either way: nvmai always enforces the schema.
func FromResponseFormat(raw json.RawMessage, opts Options) (*Schema, error) {
	if t := bytes.Trim(raw, jsonSpace); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, &ResponseFormatError{"response_format", fmt.Errorf("must be an object with a type: %v", err)}
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return ObjectMode(opts), nil
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			return nil, &ResponseFormatError{"response_format.json_schema.schema", fmt.Errorf("is missing")}
		}
		s, err := CompileCached(rf.JSONSchema.Schema, opts)
		if err != nil {
			return nil, &ResponseFormatError{"response_format.json_schema.schema", err}
		}
		return s, nil
	}
	return nil, &ResponseFormatError{"response_format.type", fmt.Errorf("%q is not one of text, json_object, json_schema", rf.Type)}
}
