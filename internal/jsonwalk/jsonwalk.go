// Package jsonwalk reads a JSON object key by key, refusing a repeated key
// (which encoding/json would silently let win): the safetensors header and
// the Hugging Face index reader share it.
package jsonwalk

import (
	"encoding/json"
	"fmt"
	"io"
)

// Object reads one JSON object from dec and calls field for each key; field
// must consume the value. A repeated key is an error, and so is a document
// that stops early (NoEOF).
func Object(dec *json.Decoder, field func(key string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return NoEOF(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("expected a JSON object, found %v", tok)
	}
	keys := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return NoEOF(err)
		}
		key := tok.(string) // inside an object, Token only yields string keys
		if keys[key] {
			return fmt.Errorf("key %q appears twice", key)
		}
		keys[key] = true
		if err := field(key); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing '}'
	return NoEOF(err)
}

// NoEOF reports a JSON document that stopped early as io.ErrUnexpectedEOF
// rather than as a bare "EOF", which reads like an I/O problem.
func NoEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
