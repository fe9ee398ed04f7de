package anthropic

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// Any body either is refused with a 400 or becomes a request the core
// renders and admits; nothing panics.
func FuzzMessagesRequest(f *testing.F) {
	for _, c := range renderCases {
		f.Add([]byte(withSignatures(c.body)))
	}
	for _, s := range []string{
		`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"a"},{"type":"image"}],"is_error":true}]}]}`,
		`{"max_tokens":1,"system":[{"type":"text","text":" x-anthropic-billing-header: a"}],"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":null}]}],"tool_choice":{"type":"any"}}`,
		`{"max_tokens":1,"messages":[{"role":"user","content":"x"}],"output_format":{"type":"json_schema","schema":{"anyOf":[{"type":"string"},{"type":"null"}]}}}`,
	} {
		f.Add([]byte(s))
	}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, counting := range []bool{false, true} {
			_, creq, err := decodeBody(t, string(body), counting)
			if err != nil {
				if st, d := classify(err); st != 400 && st != 413 || d.Type == "" || d.Message == "" {
					t.Fatalf("refused with %d %+v", st, d)
				}
				continue
			}
			if counting {
				s.CountChatTokens(creq)
			} else if job, err := s.PrepareChat(creq); err == nil {
				job.Cancel()
			}
		}
	})
}

// Whatever the model writes, the streamed events accumulate to the
// non-streamed content, block for block.
func FuzzStreamMatchesMessage(f *testing.F) {
	f.Add("Let me check.</think>\n\nCalling.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>", uint8(3))
	f.Add("plain <tool_call> text </think> more", uint8(1))
	f.Add("</think><tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n", uint8(5))
	f.Fuzz(runStreamCase)
}

// streamCase is one server for every fuzz input (a server per input
// would leave a timer per input behind); the script reads the current
// input's pieces.
var streamCase struct {
	once   sync.Once
	h      http.Handler
	mu     sync.Mutex
	pieces []string
}

func runStreamCase(t *testing.T, output string, cut uint8) {
	c := &streamCase
	c.once.Do(func() {
		s := server.New(server.Config{Log: func(server.RequestLog) {}})
		s.SetEngine(&servertest.Engine{Script: func(string) []string {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.pieces
		}}, servertest.Renderer{})
		h := httpapi.New(s, httpapi.Options{})
		New(s, Options{}).Mount(h)
		c.h = h
	})
	c.mu.Lock()
	c.pieces = splitEvery(output, int(cut%7)+1)
	c.mu.Unlock()
	body := `{"model":"m","max_tokens":4000,"thinking":{"type":"enabled"},"tools":[` + weatherTool + `],"messages":[{"role":"user","content":"x"}]`
	one := func(stream string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/messages", strings.NewReader(body+stream+"}"))
		req.Header.Set("Content-Type", "application/json")
		c.h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body.String())
		}
		return rec
	}
	var msg messageJSON
	if err := json.Unmarshal(one("").Body.Bytes(), &msg); err != nil {
		t.Fatal(err)
	}
	got := accumulate(t, readEvents(t, one(`,"stream":true`).Body))
	want, _ := json.Marshal(withoutIDs(msg.Content))
	if string(got) != string(want) {
		t.Fatalf("stream\n%s\nmessage\n%s", got, want)
	}
}

func splitEvery(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > n {
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	if len(r) > 0 {
		out = append(out, string(r))
	}
	return out
}

// accumulate rebuilds the content blocks from stream events, as a client
// does, and encodes them like the non-streamed message.
func accumulate(t *testing.T, events []sseEvent) []byte {
	t.Helper()
	var blocks []contentBlock
	var args []string
	for _, e := range events {
		switch e.name {
		case "content_block_start":
			raw, _ := json.Marshal(e.data["content_block"])
			var b contentBlock
			json.Unmarshal(raw, &b)
			if int(e.data["index"].(float64)) != len(blocks) {
				t.Fatalf("block %v starts out of order", e.data["index"])
			}
			blocks, args = append(blocks, b), append(args, "")
		case "content_block_delta":
			i := int(e.data["index"].(float64))
			d := e.data["delta"].(map[string]any)
			b := &blocks[i]
			switch d["type"] {
			case "text_delta":
				*b.Text += d["text"].(string)
			case "thinking_delta":
				*b.Thinking += d["thinking"].(string)
			case "signature_delta":
				*b.Signature += d["signature"].(string)
			case "input_json_delta":
				args[i] += d["partial_json"].(string)
			}
		case "content_block_stop":
			i := int(e.data["index"].(float64))
			if blocks[i].Type == "tool_use" && args[i] != "" {
				blocks[i].Input = json.RawMessage(args[i])
			}
		}
	}
	out, _ := json.Marshal(withoutIDs(blocks))
	return out
}

// withoutIDs blanks the tool_use ids, which differ between generations.
func withoutIDs(blocks []contentBlock) []contentBlock {
	out := []contentBlock{}
	for _, b := range blocks {
		if b.Type == "tool_use" {
			if !strings.HasPrefix(b.ID, "toolu_") {
				panic("tool_use id " + b.ID)
			}
			b.ID = "toolu_"
		}
		out = append(out, b)
	}
	return out
}
