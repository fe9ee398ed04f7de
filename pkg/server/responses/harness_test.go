package responses

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// qwen36 is the real Qwen3.6 chat template (pkg/chattemplate's copy of
// the release's chat_template.jinja), so the goldens are the prompts a
// real install renders.
func qwen36(t testing.TB) server.Renderer {
	t.Helper()
	tmpl, err := chattemplate.Load(filepath.Join("..", "..", "chattemplate", "testdata", "models", "qwen36"))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

type harness struct {
	t      *testing.T
	eng    *servertest.Engine
	http   *httptest.Server
	client oai.Client
	logs   *adaptertest.LogBuffer
}

// newHarness serves the endpoint over eng with the Qwen3.6 template and
// a fixed clock (ids and created_at are then the same at every run).
func newHarness(t *testing.T, eng *servertest.Engine, opt Options) *harness {
	t.Helper()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := server.New(server.Config{Log: func(server.RequestLog) {}, Now: func() time.Time { return now }})
	s.SetEngine(eng, qwen36(t))
	oh := httpapi.New(s, httpapi.Options{})
	logs := &adaptertest.LogBuffer{}
	opt.Log = logs
	New(s, opt).Mount(oh)
	hs := httptest.NewServer(oh)
	t.Cleanup(hs.Close)
	c := adaptertest.OpenAIClient(hs, "k")
	return &harness{t: t, eng: eng, http: hs, client: c, logs: logs}
}

func (h *harness) post(body string) (int, string) {
	h.t.Helper()
	resp, err := h.http.Client().Post(h.http.URL+Path, "application/json", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *harness) lastPrompt() string {
	p := h.eng.Prompts()
	if len(p) == 0 {
		h.t.Fatal("the engine generated nothing")
	}
	return p[len(p)-1]
}

func script(pieces ...string) func(string) []string { return func(string) []string { return pieces } }

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	Name string
	Data string
}

func parseSSE(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" || cur.Data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

var idPattern = regexp.MustCompile(`\b(resp|msg|fc|rs|call)_[0-9a-zA-Z]+`)

// normalizeIDs renames ids to prefix_1, prefix_2, … in order of first
// appearance, so that goldens and two responses can be compared.
func normalizeIDs(s string) string {
	seen := map[string]string{}
	count := map[string]int{}
	return idPattern.ReplaceAllStringFunc(s, func(id string) string {
		if n, ok := seen[id]; ok {
			return n
		}
		prefix := id[:strings.IndexByte(id, '_')]
		count[prefix]++
		seen[id] = prefix + "_" + strconv.Itoa(count[prefix])
		return seen[id]
	})
}

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func indentJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "", " "); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return b.String()
}
