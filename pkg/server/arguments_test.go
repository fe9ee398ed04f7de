package server

import (
	"errors"
	"strings"
	"testing"
)

func TestToolArgumentsTakeObjectsAndNameTheFieldOtherwise(t *testing.T) {
	const param = "messages[1].tool_calls[0].function.arguments"
	cases := []struct {
		name, raw string
		want      string // the arguments passed on; "" means refused
		why       string // in the refusal
	}{
		{"object", `{"a":1}`, `{"a":1}`, ""},
		{"object with spaces", ` {"b":2} `, `{"b":2}`, ""},
		{"string holding an object", `"{\"z\":1,\"a\":2}"`, `{"z":1,"a":2}`, ""},
		{"absent", ``, `{}`, ""},
		{"null", `null`, `{}`, ""},
		{"blank string", `"  "`, `{}`, ""},
		{"string not JSON", `"{not json"`, "", "not valid JSON"},
		{"truncated call", `"{\"path\":\"/tm"`, "", "not valid JSON"},
		{"string holding an array", `"[1,2]"`, "", "string holding a JSON array"},
		{"string holding a string", `"\"x\""`, "", "string holding a JSON string"},
		{"array", `[1]`, "", "it is a JSON array"},
		{"number", `5`, "", "it is a JSON number"},
		{"boolean", `true`, "", "it is a JSON boolean"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ToolArguments([]byte(c.raw), param)
			if c.want != "" {
				if err != nil || string(got) != c.want {
					t.Fatalf("got %s, %v; want %s", got, err, c.want)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) || se.Kind != KindInvalid || se.Param != param ||
				!strings.HasPrefix(se.Msg, param+" is not a JSON object") || !strings.Contains(se.Msg, c.why) {
				t.Fatalf("got %s, %#v; want a 400 naming %s and %q", got, err, param, c.why)
			}
		})
	}
}
