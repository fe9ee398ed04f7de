// Command serveload drives a running nvmai-run serve (loopback only) with
// concurrent clients mixing streamed and plain chats, completions, client
// cancellations, malformed bodies and oversize prompts, then checks that
// every request was answered (200, or a 4xx in the OpenAI error envelope),
// and that the server's goroutines and RSS came back to their baseline.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type counters struct {
	ok, rejected4xx, cancelled, failed atomic.Int64
	byKind                             sync.Map // kind → *atomic.Int64
	mu                                 sync.Mutex
	failures                           []string
}

func (c *counters) kind(k string) {
	v, _ := c.byKind.LoadOrStore(k, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (c *counters) fail(format string, args ...any) {
	c.failed.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) < 20 {
		c.failures = append(c.failures, fmt.Sprintf(format, args...))
	}
}

func main() {
	base := flag.String("url", "http://127.0.0.1:8080", "server URL (loopback only)")
	clients := flag.Int("clients", 32, "concurrent clients")
	duration := flag.Duration("duration", 60*time.Second, "how long to run")
	pid := flag.Int("pid", 0, "server process id, for its RSS")
	flag.Parse()
	u, err := url.Parse(*base)
	if err != nil || !isLoopback(u.Hostname()) {
		fmt.Fprintln(os.Stderr, "serveload: -url must be a loopback address")
		os.Exit(2)
	}
	client := &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: *clients}}
	// Warm up (first requests allocate what the server keeps: the session's
	// KV, tokenizer caches) before taking the baseline.
	var warm counters
	wrng := rand.New(rand.NewPCG(99, 7))
	for range 40 {
		one(client, *base, wrng, &warm)
	}
	time.Sleep(time.Second)
	g0, rss0 := health(client, *base), rss(*pid)
	fmt.Printf("baseline: goroutines=%d rss=%.1fMiB\n", g0, float64(rss0)/(1<<20))
	var c counters
	deadline := time.Now().Add(*duration)
	var wg sync.WaitGroup
	var total atomic.Int64
	for i := range *clients {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for time.Now().Before(deadline) {
				total.Add(1)
				one(client, *base, rng, &c)
			}
		}(uint64(i))
	}
	wg.Wait()
	client.CloseIdleConnections()
	// The Go runtime returns freed memory to the OS gradually: wait up to
	// 60 s for goroutines and RSS to settle.
	var g1 int
	var rss1 int64
	settled := func() bool { return g1 >= 0 && g1 <= g0+2 && (rss0 == 0 || rss1 <= rss0+max(rss0/2, 64<<20)) }
	for i := 0; i < 60; i++ {
		time.Sleep(time.Second)
		g1, rss1 = health(client, *base), rss(*pid)
		if settled() {
			fmt.Printf("settled after %d s\n", i+1)
			break
		}
	}
	client.CloseIdleConnections()
	fmt.Printf("requests=%d ok=%d rejected_4xx=%d cancelled_by_client=%d failed=%d\n", total.Load(), c.ok.Load(), c.rejected4xx.Load(), c.cancelled.Load(), c.failed.Load())
	c.byKind.Range(func(k, v any) bool { fmt.Printf("  %s=%d\n", k, v.(*atomic.Int64).Load()); return true })
	fmt.Printf("peak rss=%.1fMiB\n", float64(peakRSS(*pid))/(1<<20))
	fmt.Printf("after: goroutines=%d (baseline %d) rss=%.1fMiB (baseline %.1fMiB)\n", g1, g0, float64(rss1)/(1<<20), float64(rss0)/(1<<20))
	for _, f := range c.failures {
		fmt.Println("FAIL:", f)
	}
	lost := total.Load() - c.ok.Load() - c.rejected4xx.Load() - c.cancelled.Load() - c.failed.Load()
	bad := c.failed.Load() > 0 || lost != 0 || !settled()
	if bad {
		fmt.Printf("RESULT: FAIL (lost=%d)\n", lost)
		os.Exit(1)
	}
	fmt.Println("RESULT: PASS")
}

const chatBody = `{"model":"m","stream":%v,"max_tokens":%d,"temperature":0.7,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Request %d: tell me something."}]}`

func one(client *http.Client, base string, rng *rand.Rand, c *counters) {
	switch r := rng.IntN(100); {
	case r < 35:
		c.kind("stream")
		call(client, base+"/v1/chat/completions", fmt.Sprintf(chatBody, true, 8+rng.IntN(24), rng.IntN(1000)), true, false, c)
	case r < 55:
		c.kind("plain")
		call(client, base+"/v1/chat/completions", fmt.Sprintf(chatBody, false, 8+rng.IntN(24), rng.IntN(1000)), false, false, c)
	case r < 70:
		c.kind("stream_cancelled")
		call(client, base+"/v1/chat/completions", fmt.Sprintf(chatBody, true, 200, rng.IntN(1000)), true, true, c)
	case r < 78:
		c.kind("completion")
		call(client, base+"/v1/completions", `{"prompt":"The capital of France is","max_tokens":8}`, false, false, c)
	case r < 88:
		c.kind("malformed")
		bodies := []string{`{"messages":[`, `{"messages":"x"}`, `{"temperature":"hot","messages":[]}`, `null`, "\x00\xff", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`}
		expect4xx(client, base+"/v1/chat/completions", bodies[rng.IntN(len(bodies))], c)
	case r < 94:
		c.kind("oversize_prompt")
		expect4xx(client, base+"/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"%s"}]}`, strings.Repeat("word ", 6000)), c)
	default:
		c.kind("oversize_body")
		expect4xx(client, base+"/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"%s"}]}`, strings.Repeat("x", 5<<20)), c)
	}
}

func post(ctx context.Context, client *http.Client, u, body string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return client.Do(req)
}

// call checks a request that may succeed (or be refused with 429).
func call(client *http.Client, u, body string, stream, cancel bool, c *counters) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	resp, err := post(ctx, client, u, body)
	if err != nil {
		c.fail("%s: %v", u, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		checkEnvelope(resp, c)
		return
	}
	if !stream {
		var v struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || len(v.Choices) != 1 {
			c.fail("%s: bad body (%v)", u, err)
			return
		}
		c.ok.Add(1)
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	events := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		events++
		if cancel && events == 2 {
			stop() // the client goes away mid-stream
			c.cancelled.Add(1)
			return
		}
		if line == "data: [DONE]" {
			c.ok.Add(1)
			return
		}
		if strings.HasPrefix(line, `data: {"error"`) {
			c.fail("%s: error in stream: %s", u, line)
			return
		}
	}
	if cancel && events < 2 {
		c.cancelled.Add(1) // finished before we could cancel; still answered
		return
	}
	c.fail("%s: stream ended without [DONE] (%v)", u, sc.Err())
}

func expect4xx(client *http.Client, u, body string, c *counters) {
	resp, err := post(context.Background(), client, u, body)
	if err != nil {
		// A server may close the connection on an oversize body after answering 413.
		c.fail("%s: %v", u, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 {
		c.fail("%s: malformed or oversize request got 200", u)
		return
	}
	checkEnvelope(resp, c)
}

func checkEnvelope(resp *http.Response, c *counters) {
	var env struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 400 || resp.StatusCode >= 500 || json.Unmarshal(b, &env) != nil || env.Error == nil || env.Error.Message == "" {
		c.fail("status %d body %.200q", resp.StatusCode, b)
		return
	}
	if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
		c.fail("429 without Retry-After")
		return
	}
	c.rejected4xx.Add(1)
	c.kind(fmt.Sprintf("status_%d", resp.StatusCode))
}

func health(client *http.Client, base string) int {
	resp, err := client.Get(base + "/health")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var v struct {
		Goroutines int `json:"goroutines"`
	}
	json.NewDecoder(resp.Body).Decode(&v)
	return v.Goroutines
}

func rss(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
