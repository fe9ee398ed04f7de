package chattemplate

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/chatparse"
)

// TestToolCallRoundTrip renders an assistant tool call with the Qwen3.5 and
// Qwen3.6 templates (3.5 writes Python reprs such as True and None, 3.6
// JSON) and parses the rendered block back with chatparse: the arguments
// come back equal, so history and live output speak the same dialect.
func TestToolCallRoundTrip(t *testing.T) {
	args := `{"s": "two\nlines", "b": true, "off": false, "n": null, "i": 3, "f": 2.5, "l": [1, "a", null], "d": {"k": "v", "a": [true]}}`
	schema := json.RawMessage(`{"type":"object","properties":{"s":{"type":"string"},"b":{"type":"boolean"},"off":{"type":"boolean"},"n":{"type":["integer","null"]},"i":{"type":"integer"},"f":{"type":"number"},"l":{"type":"array"},"d":{"type":"object"}}}`)
	msgs := []Message{
		{Role: "user", Content: "go"},
		{Role: "assistant", ContentNull: true, ToolCalls: []ToolCall{{ID: "c1", Name: "f", Arguments: json.RawMessage(args)}}},
	}
	for _, model := range []string{"qwen35", "qwen36"} {
		tmpl, err := Load("testdata/models/" + model)
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := tmpl.Render(Input{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		_, turn, _ := strings.Cut(prompt, "<|im_start|>assistant\n")
		turn, _, _ = strings.Cut(turn, "<|im_end|>")
		p := chatparse.New(chatparse.Options{InReasoning: true, Tools: []chatparse.Tool{{Name: "f", Parameters: schema}}})
		p.Push(turn)
		p.Finish()
		r := p.Result()
		if len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "f" {
			t.Fatalf("%s: parsed %+v from %q", model, r, turn)
		}
		var got, want any
		if err := json.Unmarshal([]byte(r.ToolCalls[0].Arguments), &got); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(args), &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: arguments %s from %q, want %s", model, r.ToolCalls[0].Arguments, turn, args)
		}
	}
}
