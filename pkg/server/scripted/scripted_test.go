//go:build nvmai_scripted

package scripted

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/responses"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

const twoRounds = `{"rounds":[
 {"reasoning":"I will run it.","tool_calls":[{"name":"shell","arguments":{"command":["bash","-lc","echo hi"]}},{"name":"exec_command","arguments":{"cmd":"echo nvmai-e2e-7","yield_time_ms":500}}]},
 {"reasoning":"It ran.","answer":"The command printed: {{tool_output}}"}]}`

func serve(t *testing.T, script string) (*httptest.Server, *strings.Builder) {
	t.Helper()
	dir := testfix.Embedded(t)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseScript([]byte(script), "script.json")
	if err != nil {
		t.Fatal(err)
	}
	log := &strings.Builder{}
	tmpl, err := chattemplate.Load(filepath.Join(testfix.RepoRoot(t), "pkg", "chattemplate", "testdata", "models", "qwen36"))
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Log: func(server.RequestLog) {}})
	srv.SetEngine(New(tok, s, log), tmpl)
	oh := httpapi.New(srv, httpapi.Options{})
	responses.New(srv, responses.Options{Log: io.Discard}).Mount(oh)
	hs := httptest.NewServer(oh)
	t.Cleanup(hs.Close)
	return hs, log
}

type output struct {
	Output []struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		CallID    string `json:"call_id"`
		Arguments string `json:"arguments"`
		Content   []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
}

func post(t *testing.T, hs *httptest.Server, body string) output {
	t.Helper()
	resp, err := hs.Client().Post(hs.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var o output
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// Two rounds of a Codex-shaped loop through the real tokenizer, the real
// Qwen3.6 template and the server's parsers: the first calls the offered
// alternative (exec_command, not shell), the second quotes its output.
func TestTwoRoundToolLoop(t *testing.T) {
	hs, log := serve(t, twoRounds)
	tools := `"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"},"yield_time_ms":{"type":"number"}}}},{"type":"web_search"}]`
	first := post(t, hs, `{"input":"run it",`+tools+`}`)
	if len(first.Output) != 2 || first.Output[0].Type != "reasoning" || first.Output[1].Name != "exec_command" || first.Output[1].Arguments != `{"cmd":"echo nvmai-e2e-7","yield_time_ms":500}` {
		t.Fatalf("round one: %+v", first)
	}
	call := first.Output[1]
	second := post(t, hs, `{"input":[{"role":"user","content":"run it"},{"type":"function_call","call_id":"`+call.CallID+`","name":"exec_command","arguments":`+jsonString(call.Arguments)+`},{"type":"function_call_output","call_id":"`+call.CallID+`","output":"nvmai-e2e-7\n"}],`+tools+`}`)
	last := second.Output[len(second.Output)-1]
	if last.Type != "message" || last.Content[0].Text != "The command printed: nvmai-e2e-7" {
		t.Fatalf("round two: %+v", second)
	}
	if !strings.Contains(log.String(), `round 2 of 2; tools offered: exec_command; tool results since the last user message: 1; last tool output: "nvmai-e2e-7"`) {
		t.Fatalf("log:\n%s", log)
	}
	// A new question starts at round one again.
	again := post(t, hs, `{"input":[{"role":"user","content":"run it"},{"type":"function_call","call_id":"c","name":"exec_command","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"},{"role":"user","content":"once more"}],`+tools+`}`)
	if again.Output[len(again.Output)-1].Type != "function_call" {
		t.Fatalf("new question: %+v", again)
	}
}

func TestNoOfferedToolIsSaid(t *testing.T) {
	hs, _ := serve(t, twoRounds)
	o := post(t, hs, `{"input":"run it","reasoning":{"effort":"none"}}`)
	if len(o.Output) != 1 || !strings.Contains(o.Output[0].Content[0].Text, "none of the script's tools (shell, exec_command)") {
		t.Fatalf("%+v", o)
	}
}

func TestParseScriptErrors(t *testing.T) {
	cases := map[string]string{
		`{}`:              "rounds is empty",
		`{"rounds":[{}]}`: "neither tool_calls nor an answer",
		`{"rounds":[{"tool_calls":[{"arguments":{}}]}]}`:             "has no name",
		`{"rounds":[{"tool_calls":[{"name":"f","arguments":[1]}]}]}`: "must be a JSON object",
		`{"rounds":[],"extra":1}`:                                    "unknown field",
	}
	for in, want := range cases {
		if _, err := ParseScript([]byte(in), "s.json"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", in, err, want)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
