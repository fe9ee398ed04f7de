package server

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Chat completions and Responses decode tool_choice with one function;
// they differ only in where a named choice writes its name and in what
// an object of another type means.
func TestParseToolChoice(t *testing.T) {
	cases := []struct {
		raw    string
		syntax ToolChoiceSyntax
		mode   ToolChoiceMode
		name   string
		param  string // of the error; "" = no error
		msg    string
	}{
		{``, ToolChoiceChat, ToolAuto, "", "", ""},
		{`null`, ToolChoiceFlat, ToolAuto, "", "", ""},
		{`"none"`, ToolChoiceChat, ToolNone, "", "", ""},
		{`"required"`, ToolChoiceFlat, ToolRequired, "", "", ""},
		{`"any"`, ToolChoiceChat, "", "", "tool_choice", `"function":{"name":…}}`},
		{`"any"`, ToolChoiceFlat, "", "", "tool_choice", `{"type":"function","name":…}`},
		{`{"type":"function","function":{"name":"f"}}`, ToolChoiceChat, ToolNamed, "f", "", ""},
		{`{"type":"function","name":"f"}`, ToolChoiceChat, "", "", "tool_choice", "expected auto, none, required"},
		{`{"type":"function","name":"f"}`, ToolChoiceFlat, ToolNamed, "f", "", ""},
		{`{"type":"function","function":{"name":"g"}}`, ToolChoiceFlat, ToolNamed, "g", "", ""},
		{`{"type":"web_search"}`, ToolChoiceFlat, ToolAuto, "", "", ""},
		{`{"type":"function"}`, ToolChoiceFlat, "", "", "tool_choice.name", "needs a name"},
		{`[1]`, ToolChoiceFlat, "", "", "tool_choice", "a string or an object"},
		{`[1]`, ToolChoiceChat, "", "", "tool_choice", "expected auto, none, required"},
	}
	for _, c := range cases {
		mode, name, err := ParseToolChoice(json.RawMessage(c.raw), c.syntax)
		var se *Error
		switch {
		case c.param == "" && (err != nil || mode != c.mode || name != c.name):
			t.Errorf("%s (%d): %q %q %v, want %q %q", c.raw, c.syntax, mode, name, err, c.mode, c.name)
		case c.param != "" && (!errors.As(err, &se) || se.Kind != KindInvalid || se.Param != c.param || !strings.Contains(se.Msg, c.msg)):
			t.Errorf("%s (%d): error %v, want %s naming %s", c.raw, c.syntax, err, c.msg, c.param)
		}
	}
}
