// Package jsonobj reads a JSON object's members in the order they are
// written, which encoding/json's maps lose: the protocol adapters and the
// scripted engine re-emit tool schemas and arguments in the client's order.
// It also holds the one encoder of the server's answers (Marshal).
package jsonobj

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Field is one member of an object.
type Field struct {
	Key   string
	Value json.RawMessage
}

// Fields returns an object's members in their order; raw that is not one
// JSON object is an error.
func Fields(raw json.RawMessage) ([]Field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not an object")
	}
	var out []Field
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, Field{Key: k.(string), Value: v})
	}
	return out, nil
}

// Marshal encodes v without HTML escaping (prompts and code hold < > &,
// which encoding/json would write as \u003c …) and without a final
// newline.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
