package jsonwalk

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestObject(t *testing.T) {
	for _, tc := range []struct {
		doc, keys, err string
	}{
		{`{"a": 1, "b": {"c": 2}}`, "a,b", ""},
		{`{}`, "", ""},
		{`{"a": 1, "a": 2}`, "a", `key "a" appears twice`},
		{`[1]`, "", "expected a JSON object"},
		{`{"a": 1`, "a", "unexpected end of JSON input"},
		{``, "", io.ErrUnexpectedEOF.Error()},
	} {
		dec := json.NewDecoder(strings.NewReader(tc.doc))
		var keys []string
		err := Object(dec, func(key string) error {
			keys = append(keys, key)
			var v any
			return dec.Decode(&v)
		})
		if got := strings.Join(keys, ","); got != tc.keys || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: keys %q, err %v; want %q and %q", tc.doc, got, err, tc.keys, tc.err)
		}
		if tc.err == io.ErrUnexpectedEOF.Error() && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: %v is not io.ErrUnexpectedEOF", tc.doc, err)
		}
	}
}
