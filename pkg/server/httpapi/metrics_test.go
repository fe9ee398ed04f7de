package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// metricSample is one sample line of the text exposition format.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics parses Prometheus' text format (version 0.0.4) strictly:
// every sample's family has a HELP and a TYPE line before it, label values
// are quoted with only the three escapes the format allows, and every value
// parses as a float. It returns the samples and each family's type.
func parseMetrics(t *testing.T, text string) ([]metricSample, map[string]string) {
	t.Helper()
	help, types := map[string]bool{}, map[string]string{}
	var samples []metricSample
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, text, _ := strings.Cut(f, " ")
			if text == "" || help[name] {
				t.Fatalf("line %d: HELP of %s empty or repeated: %q", n, name, line)
			}
			help[name] = true
			continue
		}
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			if typ != "counter" && typ != "gauge" || types[name] != "" {
				t.Fatalf("line %d: TYPE of %s: %q", n, name, line)
			}
			types[name] = typ
			continue
		}
		s := metricSample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(line, "{ "); i > 0 {
			s.name, rest = line[:i], line[i:]
		}
		if !strings.HasPrefix(s.name, "nvmai_") || !help[s.name] || types[s.name] == "" {
			t.Fatalf("line %d: a sample without the nvmai_ prefix or before its HELP and TYPE: %q", n, line)
		}
		if strings.HasPrefix(rest, "{") {
			rest = parseLabels(t, n, rest[1:], s.labels)
		}
		v, err := strconv.ParseFloat(strings.TrimPrefix(rest, " "), 64)
		if err != nil || !strings.HasPrefix(rest, " ") {
			t.Fatalf("line %d: value: %q", n, line)
		}
		s.value = v
		samples = append(samples, s)
	}
	return samples, types
}

// parseLabels reads name="value" pairs up to the closing brace into
// labels and returns what follows it.
func parseLabels(t *testing.T, n int, s string, labels map[string]string) string {
	t.Helper()
	for {
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			t.Fatalf("line %d: label: %q", n, s)
		}
		var v strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			c := rest[i]
			if c == '\n' {
				t.Fatalf("line %d: raw line feed in a label value", n)
			}
			if c == '\\' {
				i++
				switch {
				case i < len(rest) && rest[i] == 'n':
					c = '\n'
				case i < len(rest) && (rest[i] == '\\' || rest[i] == '"'):
					c = rest[i]
				default:
					t.Fatalf("line %d: bad escape in %q", n, rest)
				}
			}
			v.WriteByte(c)
		}
		if i == len(rest) {
			t.Fatalf("line %d: unterminated label value", n)
		}
		labels[name] = v.String()
		s = rest[i+1:]
		if r, ok := strings.CutPrefix(s, ","); ok {
			s = r
			continue
		}
		if r, ok := strings.CutPrefix(s, "}"); ok {
			return r
		}
		t.Fatalf("line %d: after a label: %q", n, s)
	}
}

// value is the sample of name with the given labels (name=value pairs).
func value(samples []metricSample, name string, labels ...string) (float64, bool) {
next:
	for _, s := range samples {
		if s.name != name || len(s.labels) != len(labels)/2 {
			continue
		}
		for i := 0; i < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}

// reportingEngine is the fake engine with a prompt cache that reused half
// of each prompt, and an expert cache with fixed counters.
type reportingEngine struct{ *servertest.Engine }

func (e reportingEngine) Generate(ctx context.Context, g server.Generation, onToken func(string) bool) (server.Outcome, error) {
	out, err := e.Engine.Generate(ctx, g, onToken)
	out.CachedTokens = len(g.Prompt) / 2
	return out, err
}

func (reportingEngine) ExpertCacheStats() (server.ExpertCacheStats, bool) {
	return server.ExpertCacheStats{Hits: 30, Misses: 10, BytesRead: 1 << 20}, true
}

// do sends one request to h and returns the response.
func do(h http.Handler, method, path, key, body string) *httptest.ResponseRecorder {
	var req *http.Request
	if body == "" {
		req = httptest.NewRequest(method, "/", nil)
	} else {
		req = httptest.NewRequest(method, "/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	req.URL.Path = path // may hold what a request line cannot (a quote, a line feed)
	req.Host = "127.0.0.1"
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// scrape answers GET /metrics, checking its status and content type.
func scrape(t *testing.T, h http.Handler, key string) []metricSample {
	t.Helper()
	rec := do(h, http.MethodGet, httpapi.MetricsPath, key, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Fatalf("GET /metrics: Content-Type %q", ct)
	}
	samples, _ := parseMetrics(t, rec.Body.String())
	return samples
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// /metrics counts the requests by endpoint and status, and the tokens of
// their answers' usage, in the text format; a path no route serves is
// counted under endpoint "other" whatever it holds; the expert-cache
// counters appear only for an engine that has them (#39 item 6).
func TestMetricsCountRequestsAndTokens(t *testing.T) {
	chat := `{"messages":[{"role":"user","content":"hello there"}]}`
	type request struct{ method, path, body string }
	cases := []struct {
		name     string
		reporter bool // the engine reports prompt-cache reuse and an expert cache
		requests []request
	}{
		{"fake engine", false, []request{
			{"POST", "/v1/chat/completions", chat},
			{"POST", "/v1/chat/completions", chat},
			{"POST", "/v1/completions", `{"prompt":"once upon","max_tokens":2}`},
			{"POST", "/v1/chat/completions", `{`},
			{"POST", "/v1/chat/completions", `{"messages":[]}`},
			{"GET", "/v1/models", ""},
			{"GET", "/nope", ""},
		}},
		{"engine with caches", true, []request{
			{"POST", "/v1/chat/completions", chat},
			{"POST", "/v1/completions", `{"prompt":"a longer prompt","max_tokens":5}`},
			{"GET", "/x\"} 1\nnvmai_requests_total{endpoint=\"forged", ""},
			{"GET", "/évil\\path", ""},
			{"DELETE", "/v1/models", ""},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := server.New(server.Config{Log: func(server.RequestLog) {}})
			var eng server.Engine = &servertest.Engine{}
			if c.reporter {
				eng = reportingEngine{&servertest.Engine{}}
			}
			s.SetEngine(eng, servertest.Renderer{})
			h := serveAll(s, httpapi.Options{})
			want := map[string]int{} // "endpoint status" → count
			var sum usage
			for _, r := range c.requests {
				rec := do(h, r.method, r.path, "", r.body)
				endpoint := r.path
				if strings.ContainsAny(r.path, "\"\\\n") || r.path == "/nope" {
					endpoint = "other"
				}
				want[fmt.Sprintf("%s %d", endpoint, rec.Code)]++
				var body struct{ Usage *usage }
				if rec.Code == http.StatusOK && json.Unmarshal(rec.Body.Bytes(), &body) == nil && body.Usage != nil {
					sum.PromptTokens += body.Usage.PromptTokens
					sum.CompletionTokens += body.Usage.CompletionTokens
					sum.PromptTokensDetails.CachedTokens += body.Usage.PromptTokensDetails.CachedTokens
				}
			}
			samples := scrape(t, h, "")
			got := map[string]int{}
			for _, sm := range samples {
				if sm.name == "nvmai_requests_total" {
					if len(sm.labels) != 2 {
						t.Errorf("labels of %v: want endpoint and status", sm.labels)
					}
					got[sm.labels["endpoint"]+" "+sm.labels["status"]] = int(sm.value)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("nvmai_requests_total:\n got %v\nwant %v", got, want)
			}
			if want["other 404"] == 0 || want["/v1/chat/completions 200"]+want["/v1/completions 200"] == 0 {
				t.Fatalf("the table must have answered and unknown requests: %v", want)
			}
			for _, m := range []struct {
				name string
				want int
			}{
				{"nvmai_prompt_tokens_total", sum.PromptTokens},
				{"nvmai_generated_tokens_total", sum.CompletionTokens},
				{"nvmai_prompt_cache_reused_tokens_total", sum.PromptTokensDetails.CachedTokens},
				{"nvmai_queue_depth", 0},
				{"nvmai_active_generations", 0},
			} {
				if v, ok := value(samples, m.name); !ok || v != float64(m.want) {
					t.Errorf("%s = %v (present %v), want %d", m.name, v, ok, m.want)
				}
			}
			if c.reporter && sum.PromptTokensDetails.CachedTokens == 0 {
				t.Fatal("the engine reported no reused prompt tokens")
			}
			for name, want := range map[string]float64{"nvmai_expert_cache_hits_total": 30, "nvmai_expert_cache_misses_total": 10, "nvmai_expert_bytes_read_total": 1 << 20} {
				v, ok := value(samples, name)
				if ok != c.reporter || (ok && v != want) {
					t.Errorf("%s = %v (present %v): want it only for an engine with an expert cache, = %v", name, v, ok, want)
				}
			}
		})
	}
}

// The queue gauges show a running generation and a waiting request, and a
// request the full queue refuses is counted under 429.
func TestMetricsQueueGaugesAndRefusals(t *testing.T) {
	s := server.New(server.Config{QueueLimit: 1, Log: func(server.RequestLog) {}})
	eng := &servertest.Engine{TokenDelay: 200 * time.Millisecond}
	s.SetEngine(eng, servertest.Renderer{})
	h := serveAll(s, httpapi.Options{})
	chat := `{"messages":[{"role":"user","content":"hi"}]}`
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rec := do(h, "POST", "/v1/chat/completions", "", chat); rec.Code != http.StatusOK {
				t.Errorf("%d %s", rec.Code, rec.Body)
			}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if a := s.Activity(); a.Waiting == 1 && a.Generating == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request ran while another waited: %+v", s.Activity())
		}
	}
	samples := scrape(t, h, "")
	for name, want := range map[string]float64{"nvmai_queue_depth": 1, "nvmai_active_generations": 1} {
		if v, _ := value(samples, name); v != want {
			t.Errorf("%s = %v while one request ran and one waited", name, v)
		}
	}
	if rec := do(h, "POST", "/v1/chat/completions", "", chat); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("a full queue answered %d", rec.Code)
	}
	wg.Wait()
	samples = scrape(t, h, "")
	for _, c := range []struct {
		status string
		want   float64
	}{{"200", 2}, {"429", 1}} {
		if v, _ := value(samples, "nvmai_requests_total", "endpoint", "/v1/chat/completions", "status", c.status); v != c.want {
			t.Errorf("requests with status %s: %v, want %v", c.status, v, c.want)
		}
	}
	if v, _ := value(samples, "nvmai_active_generations"); v != 0 {
		t.Errorf("nvmai_active_generations = %v once every request ended", v)
	}
}

// /metrics is behind the API key when one is set, and behind the Host and
// Origin checks; a refused scrape is counted, an answered one is not.
func TestMetricsAuthorization(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	keyed := serveAll(s, httpapi.Options{APIKey: "k"})
	if rec := do(keyed, "GET", httpapi.MetricsPath, "", ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("without the key: %d", rec.Code)
	}
	if rec := do(keyed, "GET", httpapi.MetricsPath, "wrong", ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("with a wrong key: %d", rec.Code)
	}
	samples := scrape(t, keyed, "k")
	if v, _ := value(samples, "nvmai_requests_total", "endpoint", "/metrics", "status", "401"); v != 2 {
		t.Errorf("refused scrapes counted %v, want 2", v)
	}
	if _, ok := value(samples, "nvmai_requests_total", "endpoint", "/metrics", "status", "200"); ok {
		t.Error("an answered scrape was counted")
	}

	open := serveAll(s, httpapi.Options{})
	req := httptest.NewRequest(http.MethodGet, httpapi.MetricsPath, nil)
	req.Host = "attacker.example"
	rec := httptest.NewRecorder()
	open.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("a foreign Host: %d", rec.Code)
	}
	req = httptest.NewRequest(http.MethodGet, httpapi.MetricsPath, nil)
	req.Host = "127.0.0.1"
	req.Header.Set("Origin", "http://attacker.example")
	rec = httptest.NewRecorder()
	open.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("a foreign Origin: %d", rec.Code)
	}
}

// Requests and scrapes at once: the counters end equal to the requests
// made (run with -race).
func TestMetricsConcurrent(t *testing.T) {
	s := server.New(server.Config{QueueLimit: 64, Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	h := serveAll(s, httpapi.Options{})
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			path := "/v1/chat/completions"
			if i%2 == 1 {
				path = fmt.Sprintf("/random/%d", i)
			}
			do(h, "POST", path, "", `{"messages":[{"role":"user","content":"hi"}]}`)
		}()
		go func() {
			defer wg.Done()
			if rec := do(h, "GET", httpapi.MetricsPath, "", ""); rec.Code != http.StatusOK {
				t.Errorf("scrape: %d", rec.Code)
			}
		}()
	}
	wg.Wait()
	samples := scrape(t, h, "")
	ok, _ := value(samples, "nvmai_requests_total", "endpoint", "/v1/chat/completions", "status", "200")
	other, _ := value(samples, "nvmai_requests_total", "endpoint", "other", "status", "404")
	if ok != n/2 || other != n/2 {
		t.Errorf("counted %v answered and %v unknown, want %d each", ok, other, n/2)
	}
}
