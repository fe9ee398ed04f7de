package chattemplate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkRenderAgentHistory renders a coding-agent history with the
// Qwen3.6 template: a system prompt, two tools and 150 tool round trips,
// converted from OpenAI JSON each time as a server would.
func BenchmarkRenderAgentHistory(b *testing.B) {
	tmpl, err := Load("testdata/models/qwen36")
	if err != nil {
		b.Fatal(err)
	}
	var msgs []string
	msgs = append(msgs, `{"role":"system","content":"You are a coding agent."}`, `{"role":"user","content":"Fix the build."}`)
	file := strings.Repeat("func f() { return }\n", 50)
	for i := 0; i < 150; i++ {
		args, _ := json.Marshal(fmt.Sprintf(`{"path": "pkg/f%d.go", "content": %q}`, i, file))
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"assistant","content":"","reasoning_content":"Step %d.","tool_calls":[{"id":"c%d","type":"function","function":{"name":"write_file","arguments":%s}}]}`, i, i, args),
			fmt.Sprintf(`{"role":"tool","tool_call_id":"c%d","content":"ok %d"}`, i, i))
	}
	raw := json.RawMessage("[" + strings.Join(msgs, ",") + "]")
	tools := []json.RawMessage{
		json.RawMessage(`{"type":"function","function":{"name":"write_file","description":"Write a file.","parameters":{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}}}`),
		json.RawMessage(`{"type":"function","function":{"name":"read_file","description":"Read a file.","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}`),
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := FromOpenAIMessages(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tmpl.Render(Input{Messages: m, Tools: tools, AddGenerationPrompt: true}); err != nil {
			b.Fatal(err)
		}
	}
}
