package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// FuzzRenderOpenAIMessages feeds arbitrary messages arrays through the
// conversion and the Qwen3.6 template: nothing panics, and every failure is
// an *InputError or a *RenderError (the request's fault, a 400).
func FuzzRenderOpenAIMessages(f *testing.F) {
	data, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		f.Fatal(err)
	}
	var cases []goldenCase
	if err := json.Unmarshal(data, &cases); err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		f.Add([]byte(c.Messages))
	}
	tmpl, err := Load("testdata/models/qwen36")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		msgs, err := FromOpenAIMessages(raw)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("FromOpenAIMessages error %T %v", err, err)
			}
			return
		}
		_, err = tmpl.Render(Input{Messages: msgs, AddGenerationPrompt: true})
		var re *RenderError
		if err != nil && !errors.As(err, &re) {
			t.Fatalf("Render error %T %v", err, err)
		}
	})
}
