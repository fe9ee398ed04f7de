// Command serveload drives a running nvmai-run serve (loopback only) with
// concurrent clients mixing streamed and plain chats, completions, client
// cancellations, malformed bodies and oversize prompts, then checks that
// every request was answered (200, or a 4xx in the OpenAI error envelope),
// and that the server's goroutines and RSS came back to their baseline.
//
// With -slow-readers and -conn-hogs (or -hogs for both), hostile clients
// run beside them: streams whose client reads almost nothing, and idle
// keep-alive connections held open after a GET /health each. The report
// gives the other clients' median latency, to compare with a run without
// them (scripts/serve-load.sh --compare-hogs).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type counters struct {
	ok, rejected4xx, cancelled, failed atomic.Int64
	byKind                             sync.Map // kind → *atomic.Int64
	mu                                 sync.Mutex
	failures                           []string
	latencies                          []time.Duration // of answered requests (200 or 4xx), cancellations excluded
	okLatencies                        []time.Duration // of the 200s
}

func (c *counters) took(d time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latencies = append(c.latencies, d)
	if ok {
		c.okLatencies = append(c.okLatencies, d)
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
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
	slowReaders := flag.Int("slow-readers", 0, "hostile clients that pipeline streamed requests and read almost nothing")
	slowPipeline := flag.Int("slow-pipeline", 200, "streamed requests each slow reader sends at once on its connection")
	slowTokens := flag.Int("slow-tokens", 32, "max_tokens of each slow reader's request (the kernel holds about 4 MB of a connection's unread answers, so a cut-off needs many requests or long ones, which cost the engine time as any client's would)")
	connHogs := flag.Int("conn-hogs", 0, "idle keep-alive connections held open (a GET /health each, renewed every 5 s)")
	hogs := flag.Bool("hogs", false, "shorthand for -slow-readers 2 -conn-hogs 64 (the server's default --max-connections)")
	flag.Parse()
	if *hogs {
		*slowReaders, *connHogs = max(*slowReaders, 2), max(*connHogs, 64)
	}
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
	var hostile hostileStats
	var hwg sync.WaitGroup
	for i := range *slowReaders {
		hwg.Add(1)
		go func() { defer hwg.Done(); slowReader(u.Host, i, *slowPipeline, *slowTokens, deadline, &hostile) }()
	}
	for range *connHogs {
		hwg.Add(1)
		go func() { defer hwg.Done(); connHog(u.Host, deadline, &hostile) }()
	}
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
	hwg.Wait()
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
	c.mu.Lock()
	fmt.Printf("other clients: median latency %.1f ms over %d answered requests; %.1f ms over %d completions (200)\n",
		ms(median(c.latencies)), len(c.latencies), ms(median(c.okLatencies)), len(c.okLatencies))
	fmt.Printf("median_ms=%.2f median_ok_ms=%.2f\n", ms(median(c.latencies)), ms(median(c.okLatencies)))
	c.mu.Unlock()
	if *slowReaders+*connHogs > 0 {
		fmt.Printf("hostile: slow readers %d (%d requests sent, cut off by the server %d times), conn hogs %d (%d connections opened, %d closed by the server)\n",
			*slowReaders, hostile.slowSent.Load(), hostile.slowCut.Load(), *connHogs, hostile.hogOpened.Load(), hostile.hogClosed.Load())
	}
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
	var conn httptrace.GotConnInfo
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conn = i }})
	req, _ := http.NewRequestWithContext(ctx, "POST", u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		// Which connection it was tells a server closing a connection in
		// use from one closing an idle one as the client reused it.
		switch {
		case conn.Reused:
			err = fmt.Errorf("%w (on a connection reused after %v idle)", err, conn.IdleTime.Round(time.Millisecond))
		case conn.WasIdle:
			err = fmt.Errorf("%w (on a new connection that waited %v unused in the client's pool)", err, conn.IdleTime.Round(time.Millisecond))
		default:
			err = fmt.Errorf("%w (on a new connection)", err)
		}
	}
	return resp, err
}

// call checks a request that may succeed (or be refused with 429).
func call(client *http.Client, u, body string, stream, cancel bool, c *counters) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	start := time.Now()
	resp, err := post(ctx, client, u, body)
	if err != nil {
		c.fail("%s: %v", u, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		if checkEnvelope(resp, c) {
			c.took(time.Since(start), false)
		}
		return
	}
	answered := func() {
		c.ok.Add(1)
		if !cancel {
			c.took(time.Since(start), true)
		}
	}
	if !stream {
		var v struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || len(v.Choices) != 1 {
			c.fail("%s: bad body (%v)", u, err)
			return
		}
		answered()
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
			answered()
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
	start := time.Now()
	resp, err := post(context.Background(), client, u, body)
	if err != nil {
		// A server may close the connection on an oversize body after answering 413.
		c.fail("%s (a refusal expected, body of %d bytes): %v", u, len(body), err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 {
		c.fail("%s: malformed or oversize request got 200", u)
		return
	}
	if checkEnvelope(resp, c) {
		c.took(time.Since(start), false)
	}
}

// checkEnvelope counts a refusal, reporting whether it was a proper one.
func checkEnvelope(resp *http.Response, c *counters) bool {
	var env struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 400 || resp.StatusCode >= 500 || json.Unmarshal(b, &env) != nil || env.Error == nil || env.Error.Message == "" {
		c.fail("status %d body %.200q", resp.StatusCode, b)
		return false
	}
	if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
		c.fail("429 without Retry-After")
		return false
	}
	c.rejected4xx.Add(1)
	c.kind(fmt.Sprintf("status_%d", resp.StatusCode))
	return true
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

type hostileStats struct {
	slowSent, slowCut, hogOpened, hogClosed atomic.Int64
}

// slowReader pipelines streamed chats on one connection with a 4 KiB
// receive buffer and reads 64 bytes a second: the server must cut it off
// (--stream-write-timeout) rather than let it hold the engine. It
// reconnects whenever the server closes the connection.
func slowReader(host string, seed, pipeline, tokens int, deadline time.Time, st *hostileStats) {
	for n := 0; time.Now().Before(deadline); n++ {
		// The receive buffer is set before connecting, so that the window
		// the kernel offers stays small (about 3 MB of answers then fit in
		// the two kernels' buffers before the server's writes block).
		d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}}
		c, err := d.Dial("tcp", host)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var req strings.Builder
		for i := range pipeline {
			body := fmt.Sprintf(chatBody, true, tokens, seed*100000+n*1000+i)
			fmt.Fprintf(&req, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, len(body), body)
		}
		c.SetWriteDeadline(deadline)
		if _, err := io.WriteString(c, req.String()); err == nil {
			st.slowSent.Add(int64(pipeline))
		}
		buf := make([]byte, 64)
		cut := false
		for time.Now().Before(deadline) {
			c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := io.ReadFull(c, buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				cut = true
				break
			}
			time.Sleep(min(time.Second, time.Until(deadline)))
		}
		if cut {
			st.slowCut.Add(1)
		}
		c.Close()
	}
}

// connHog holds one keep-alive connection idle after a GET /health,
// renewing it every 5 s and reopening it when the server closes it.
func connHog(host string, deadline time.Time, st *hostileStats) {
	var c net.Conn
	var br *bufio.Reader
	for time.Now().Before(deadline) {
		if c == nil {
			var err error
			if c, err = net.DialTimeout("tcp", host, 5*time.Second); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			st.hogOpened.Add(1)
			br = bufio.NewReader(c)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err != nil {
			st.hogClosed.Add(1)
			c.Close()
			c = nil
			continue
		}
		time.Sleep(min(5*time.Second, time.Until(deadline)))
	}
	if c != nil {
		c.Close()
	}
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
