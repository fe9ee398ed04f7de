package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds the nesting of decoded JSON: Python's json module
// gives up near its default recursion limit of 1000, so nothing a Python
// client could render needs more.
const maxJSONDepth = 1000

var errTooDeep = fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)

// decodeJSON decodes one JSON value into template values, keeping object
// key order (Python's json.loads keeps it too, and tojson writes it back).
func decodeJSON(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("invalid JSON: data after the value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Value{}, errTooDeep
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		if x == '{' {
			return decodeObject(dec, depth)
		}
		if x == '[' {
			return decodeArray(dec, depth)
		}
		return jinja.Value{}, fmt.Errorf("unexpected %q", rune(x))
	case json.Number:
		return numberValue(x), nil
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected token %v", tok)
}

func decodeObject(dec *json.Decoder, depth int) (jinja.Value, error) {
	v := jinja.NewDict()
	d := v.AsDict()
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return jinja.Value{}, err
		}
		key, ok := tok.(string)
		if !ok {
			return jinja.Value{}, fmt.Errorf("object key %v is not a string", tok)
		}
		item, err := decodeValue(dec, depth+1)
		if err != nil {
			return jinja.Value{}, err
		}
		// A repeated key keeps its first position and its last value, as a
		// Python dict built by json.loads does.
		d.Set(key, item)
	}
	if _, err := dec.Token(); err != nil {
		return jinja.Value{}, err
	}
	return v, nil
}

func decodeArray(dec *json.Decoder, depth int) (jinja.Value, error) {
	var items []jinja.Value
	for dec.More() {
		item, err := decodeValue(dec, depth+1)
		if err != nil {
			return jinja.Value{}, err
		}
		items = append(items, item)
	}
	if _, err := dec.Token(); err != nil {
		return jinja.Value{}, err
	}
	if items == nil {
		items = []jinja.Value{}
	}
	return jinja.NewList(items), nil
}

// numberValue keeps Python's int/float split: a JSON number without a
// fraction or exponent is an int.
func numberValue(n json.Number) jinja.Value {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(i)
		}
	}
	f, _ := strconv.ParseFloat(s, 64)
	return jinja.NewFloat(f)
}

func trimJSONSpace(b []byte) []byte { return bytes.TrimSpace(b) }

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
