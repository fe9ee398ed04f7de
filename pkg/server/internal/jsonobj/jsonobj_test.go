package jsonobj

import (
	"fmt"
	"testing"
)

func TestFields(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: the members as key=value, or "error"
	}{
		{`{}`, `[]`},
		{` {"b":1,"a":{"z":[1,2]},"c":"x"} `, `[b=1 a={"z":[1,2]} c="x"]`},
		{`{"a":1,"a":2}`, `[a=1 a=2]`},
		{`[1]`, `error`},
		{`"s"`, `error`},
		{``, `error`},
		{`{"a":}`, `error`},
		{`{"a":1`, `error`},
	} {
		fs, err := Fields([]byte(tc.in))
		got := "error"
		if err == nil {
			var parts []string
			for _, f := range fs {
				parts = append(parts, f.Key+"="+string(f.Value))
			}
			got = fmt.Sprint(parts)
			if len(parts) == 0 {
				got = "[]"
			}
		}
		if got != tc.want {
			t.Errorf("Fields(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// Answers carry code and prompts: < > & stay as they are, and no newline
// follows (a stream frame or a body adds its own).
func TestMarshalKeepsHTMLCharacters(t *testing.T) {
	b, err := Marshal(map[string]string{"code": "if a < b && c > d {}"})
	if err != nil || string(b) != `{"code":"if a < b && c > d {}"}` {
		t.Fatalf("%s %v", b, err)
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Fatal("a func encoded")
	}
}
