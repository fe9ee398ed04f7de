package httpapi

import (
	"bytes"
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nvmai/nvmai/pkg/server"
)

// MetricsPath serves the counters in Prometheus' text exposition format.
const MetricsPath = "/metrics"

// metricsContentType is the text exposition format, version 0.0.4.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// otherEndpoint is the endpoint label of every path no route serves, so
// that clients probing random paths cannot add series without bound.
const otherEndpoint = "other"

// requestKey is one series of nvmai_requests_total.
type requestKey struct {
	endpoint string
	status   int
}

// requestMetrics are the counters of the request log: each record the
// host logs is counted here at the same spot, so the two always agree.
type requestMetrics struct {
	mu                                  sync.Mutex
	requests                            map[requestKey]int64
	promptTokens, generated, reusedToks int64
}

func (m *requestMetrics) record(endpoint string, r *server.RequestLog) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.requests == nil {
		m.requests = map[requestKey]int64{}
	}
	m.requests[requestKey{endpoint, r.Status}]++
	m.promptTokens += int64(r.PromptTokens)
	m.generated += int64(r.CompletionTokens)
	m.reusedToks += int64(r.CachedTokens)
}

// logged reports whether a finished request gets a log line (and is
// counted): /health, which load balancers poll, never does, nor does a
// scrape /metrics answered; a refused scrape does.
func logged(path string, status int) bool {
	switch path {
	case "/health":
		return false
	case MetricsPath:
		return status != http.StatusOK
	case LivePath, LiveJSONPath: // a page open on the live panel polls or streams it
		return status != http.StatusOK && status != StatusClientClosedRequest
	}
	return true
}

// endpointLabel is path when a route serves it, else otherEndpoint.
func (h *Host) endpointLabel(path string) string {
	if _, ok := h.routes[path]; ok {
		return path
	}
	return otherEndpoint
}

// metrics writes the counters and gauges in Prometheus' text format.
func (h *Host) metrics(w http.ResponseWriter, _ *http.Request, _ *server.RequestLog) error {
	var b bytes.Buffer
	m := &h.counts
	m.mu.Lock()
	keys := make([]requestKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b requestKey) int {
		return cmp.Or(strings.Compare(a.endpoint, b.endpoint), cmp.Compare(a.status, b.status))
	})
	writeFamily(&b, "nvmai_requests_total", "counter", "Requests answered, by endpoint (\"other\": a path no route serves) and HTTP status, as logged (/health and answered /metrics scrapes are not).")
	for _, k := range keys {
		fmt.Fprintf(&b, "nvmai_requests_total{endpoint=\"%s\",status=\"%d\"} %d\n", escapeLabel(k.endpoint), k.status, m.requests[k])
	}
	prompt, generated, reused := m.promptTokens, m.generated, m.reusedToks
	m.mu.Unlock()

	a := h.s.Activity()
	writeSample(&b, "nvmai_queue_depth", "gauge", "Requests waiting for their turn.", int64(a.Waiting))
	writeSample(&b, "nvmai_active_generations", "gauge", "Generations running.", int64(a.Generating))
	writeSample(&b, "nvmai_prompt_tokens_total", "counter", "Prompt tokens of the requests answered, those reused from the prompt cache included.", prompt)
	writeSample(&b, "nvmai_generated_tokens_total", "counter", "Tokens generated (completion tokens).", generated)
	writeSample(&b, "nvmai_prompt_cache_reused_tokens_total", "counter", "Prompt tokens reused from the prompt cache instead of prefilled.", reused)
	if a.HasExpert {
		// The loaded engine's own counters: they start again from zero
		// when --models-dir loads a model.
		writeSample(&b, "nvmai_expert_cache_hits_total", "counter", "Experts found in the expert cache.", a.Expert.Hits)
		writeSample(&b, "nvmai_expert_cache_misses_total", "counter", "Experts read from disk into the expert cache.", a.Expert.Misses)
		if a.Expert.PCIe {
			// The GPU's VRAM slots: every expert is in pinned RAM, none is
			// read from disk.
			writeSample(&b, "nvmai_expert_pcie_bytes_total", "counter", "Bytes of experts copied over PCIe from pinned RAM into the GPU's VRAM slots, read-ahead included.", a.Expert.BytesRead)
		} else {
			writeSample(&b, "nvmai_expert_bytes_read_total", "counter", "Bytes of experts read from disk, read-ahead included.", a.Expert.BytesRead)
		}
	}
	w.Header().Set("Content-Type", metricsContentType)
	w.Header().Set("Cache-Control", "no-store")
	_, err := w.Write(b.Bytes())
	return err
}

func writeFamily(b *bytes.Buffer, name, typ, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

func writeSample(b *bytes.Buffer, name, typ, help string, v int64) {
	writeFamily(b, name, typ, help)
	b.WriteString(name + " " + strconv.FormatInt(v, 10) + "\n")
}

// escapeLabel escapes a label value as the text format requires:
// backslash, double quote and line feed.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// escapeHelp escapes a HELP text: backslash and line feed.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
