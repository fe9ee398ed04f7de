package responses

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// FuzzRequest feeds arbitrary bodies to the decoder and the mapping, then
// renders what they accept: nothing may panic, and whatever is accepted
// renders or is refused with an error.
func FuzzRequest(f *testing.F) {
	for _, file := range requestFiles(f) {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"input":[{"type":"reasoning","summary":[{"text":"a"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"},{"role":"assistant","content":"x"}]}`))
	f.Add([]byte(`{"input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`))
	defaults := sample.Params{Temperature: 0.7, TopP: 0.95}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req request
		if json.Unmarshal(body, &req) != nil {
			return
		}
		c, err := convert(&req, nil, defaults)
		if err != nil {
			return
		}
		servertest.Renderer{}.Render(chatInput(c))
	})
}

func chatInput(c *converted) chattemplate.Input {
	return chattemplate.Input{Messages: c.chat.Messages, Tools: c.chat.Tools, AddGenerationPrompt: true}
}
