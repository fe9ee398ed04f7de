package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestTemplateInputFromRequestBody: a whole chat-completions body gives its
// tools and chat_template_kwargs; --kwargs replaces the latter.
func TestTemplateInputFromRequestBody(t *testing.T) {
	dir := t.TempDir()
	body := filepath.Join(dir, "req.json")
	if err := os.WriteFile(body, []byte(`{"model":"m","messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"chat_template_kwargs":{"enable_thinking":false}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := templateInput(body, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Messages) != 1 || len(in.Tools) != 1 || string(in.Kwargs["enable_thinking"].(json.RawMessage)) != "false" {
		t.Fatalf("input %+v", in)
	}
	in, err = templateInput(body, "", `{"preserve_thinking": true}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := in.Kwargs["enable_thinking"]; ok || in.Kwargs["preserve_thinking"] == nil {
		t.Fatalf("--kwargs did not replace the body's: %+v", in.Kwargs)
	}
	if _, err := templateInput(body, "", `[1]`); err == nil {
		t.Fatal("--kwargs that is not an object must fail")
	}
}
