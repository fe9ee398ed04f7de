package chatparse_test

import (
	"encoding/json"
	"fmt"

	"github.com/nvmai/nvmai/pkg/chatparse"
)

// A server feeds each decoded token's text and forwards the events as
// stream deltas; Result gives the non-stream response.
func Example() {
	p := chatparse.New(chatparse.Options{
		InReasoning: true, // the prompt ended in "<think>\n"
		Tools:       []chatparse.Tool{{Name: "read_file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}},
		NewID:       func() string { return "call_1" },
	})
	tokens := []string{"Need the", " file.\n</think>\n\n", "<tool_", "call>\n<function=read_file>\n", "<parameter=path>\n", "a.txt\n</parameter>\n", "</function>\n</tool_call>"}
	show := func(events []chatparse.Event) {
		for _, e := range events {
			fmt.Printf("%d %q%s\n", e.Kind, e.Text, e.Name)
		}
	}
	for _, tok := range tokens {
		show(p.Push(tok))
	}
	show(p.Finish()) // the call's end waits for the end of output (or what follows)
	r := p.Result()
	fmt.Printf("reasoning %q, content %q, call %s %s %s\n", r.Reasoning, r.Content, r.ToolCalls[0].ID, r.ToolCalls[0].Name, r.ToolCalls[0].Arguments)
	// Output:
	// 1 "Need the"
	// 1 " file.\n"
	// 2 ""read_file
	// 3 "{"
	// 3 "\"path\":\""
	// 3 "a.txt"
	// 3 "\"}"
	// reasoning "Need the file.\n", content "", call call_1 read_file {"path":"a.txt"}
}
