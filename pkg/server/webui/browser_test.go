package webui_test

// The page in a real browser: headless Chromium (Debian's package
// "chromium"), driven over the DevTools protocol by chromedp, against the
// server core over the scripted engine and over the embedded tiny model.
// Without Chromium the tests skip, unless CI or NVMAI_BROWSER=1 says the
// browser is required (.ci/run installs it).

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/openai"
	"github.com/nvmai/nvmai/pkg/server/servertest"
	"github.com/nvmai/nvmai/pkg/server/webui"
)

func TestMain(m *testing.M) { fixinstall.Main(m) }

// chromePath finds Chromium: $NVMAI_CHROME, else chromium (Debian),
// chromium-browser, google-chrome. Without one the test skips, or fails
// where the browser is required.
func chromePath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NVMAI_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found (chromium, chromium-browser, google-chrome or $NVMAI_CHROME): install it with apt-get install chromium"
	if os.Getenv("CI") != "" || os.Getenv("NVMAI_BROWSER") == "1" {
		t.Fatal(msg + " (required: CI or NVMAI_BROWSER=1 is set)")
	}
	t.Skip(msg + "; the browser tests are skipped")
	return ""
}

// browser is one headless Chromium tab; problems collects the page's
// uncaught exceptions, console errors and Content-Security-Policy
// violations, each of which fails the test.
type browser struct {
	t        *testing.T
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromePath(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Listen(ctx, b.observe); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, struct{}{}); err != nil {
		t.Fatalf("Log.enable: %v", err)
	}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.problems {
			t.Errorf("the page reported: %s", p)
		}
	})
	return b
}

func (b *browser) observe(ev any) {
	var p string
	switch ev := ev.(type) {
	case *cdpruntime.EventExceptionThrown:
		p = "uncaught exception: " + ev.ExceptionDetails.Text
		if ev.ExceptionDetails.Exception != nil {
			p += " " + ev.ExceptionDetails.Exception.Description
		}
	case *cdpruntime.EventConsoleAPICalled:
		if ev.Type == cdpruntime.ConsoleAPICalledTypeError {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			p = "console.error: " + strings.Join(args, " ")
		}
	case *cdplog.EventEntryAdded:
		// The 401 that makes the page ask for the key is expected, and so
		// is the live stream's cut when the test server closes.
		if ev.Entry.Level == cdplog.EntryLevelError && !strings.Contains(ev.Entry.Text, "status of 401") && !strings.HasSuffix(ev.Entry.URL, "/v1/live") {
			p = "log: " + ev.Entry.Text
		}
	}
	if p != "" {
		b.mu.Lock()
		b.problems = append(b.problems, p)
		b.mu.Unlock()
	}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// waitFor polls expr (a JavaScript boolean) from Go: chromedp.Poll would
// build a function with new Function, which the page's CSP forbids.
func (b *browser) waitFor(what, expr string, within time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("waited %s for %s (%s): %v; status line %q", within, what, expr, err, eval[string](b, `document.getElementById('status').textContent`))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// send types text into the message box and presses Enter.
func (b *browser) send(text string) {
	b.t.Helper()
	eval[bool](b, `(document.getElementById('input').value = '') === ''`)
	b.do(chromedp.SendKeys(chromedp.ID("input"), text), chromedp.SendKeys(chromedp.ID("input"), kb.Enter))
}

// lastReply is the text of the last assistant message.
const lastReply = `(() => { const a = document.querySelectorAll('#messages article.msg.assistant'); return a.length ? a[a.length-1] : null })()`

func (b *browser) waitDone() {
	b.t.Helper()
	b.waitFor("the reply to finish", `!document.body.classList.contains('busy') && /^(done|stopped)/.test(document.getElementById('status').textContent)`, 10*time.Second)
}

// scriptedModels serves two scripted models; each answers from the last
// user message: "slow" streams 400 tokens 40 ms apart, "xss" a reply full
// of markup, anything else a greeting naming the model.
type scriptedModels struct {
	ids     []string
	engines *sync.Map // id → the *scriptedEngine loaded last
}

func (m scriptedModels) List() []server.ModelInfo {
	out := make([]server.ModelInfo, len(m.ids))
	for i, id := range m.ids {
		out[i] = server.ModelInfo{ID: id, Context: 8192}
	}
	return out
}

func (m scriptedModels) Load(id string) (server.Engine, server.Renderer, error) {
	e := &scriptedEngine{id: id, Engine: &servertest.Engine{Context: 8192, Script: func(prompt string) []string { return script(id, prompt) }}}
	m.engines.Store(id, e)
	return e, servertest.Renderer{}, nil
}

func (scriptedModels) Unload(string) {}

type scriptedEngine struct {
	*servertest.Engine
	id string
}

func (e *scriptedEngine) Info() server.ModelInfo { return server.ModelInfo{ID: e.id, Context: 8192} }

// Generate paces the slow reply: 40 ms before each token.
func (e *scriptedEngine) Generate(ctx context.Context, g server.Generation, onToken func(string) bool) (server.Outcome, error) {
	slow := strings.Contains(lastUser(decode(g.Prompt)), "slow")
	return e.Engine.Generate(ctx, g, func(s string) bool {
		if slow {
			servertest.Sleep(ctx, 40*time.Millisecond)
		}
		return onToken(s)
	})
}

func decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteRune(rune(id))
	}
	return b.String()
}

func lastUser(prompt string) string {
	i := strings.LastIndex(prompt, "<|im_start|>user\n")
	if i < 0 {
		return ""
	}
	rest := prompt[i+len("<|im_start|>user\n"):]
	if j := strings.Index(rest, "<|im_end|>"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

const (
	scriptPayload = `<script>window.__pwned=1</script>`
	imgPayload    = `<img src=x onerror="window.__pwned=1">`
)

func script(id, prompt string) []string {
	user := lastUser(prompt)
	var text string
	switch {
	case strings.Contains(user, "slow"):
		return slices.Repeat([]string{"word "}, 400)
	case strings.Contains(user, "xss"):
		text = "Thinking " + imgPayload + "</think>\n\n" +
			"Text " + scriptPayload + " and " + imgPayload + " end.\n\n" +
			"```html\n" + scriptPayload + imgPayload + "\n```\n\n" +
			"[link](javascript:window.__pwned=1)\n\n" +
			"<tool_call>\n<function=run>\n<parameter=cmd>\n" + imgPayload + scriptPayload + "\n</parameter>\n</function>\n</tool_call>"
	default:
		text = "Let me greet.</think>\n\nHello from **" + id + "**. Here is `inline` code:\n\n- one\n- two\n\n```go\nfmt.Println(\"hi\")\n```\n"
	}
	var toks []string
	for r := []rune(text); len(r) > 0; {
		n := min(3, len(r))
		toks = append(toks, string(r[:n]))
		r = r[n:]
	}
	return toks
}

// metricsOf scrapes /metrics (with key) into name → value.
func metricsOf(t *testing.T, url, key string) map[string]int64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+httpapi.MetricsPath, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	out := map[string]int64{}
	for line := range strings.Lines(sb.String()) {
		if strings.HasPrefix(line, "#") || strings.Contains(line, "{") {
			continue
		}
		name, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
			out[name] = n
		}
	}
	return out
}

// checkLiveMatchesMetrics waits until the live panel's totals show what
// /metrics counts (the panel updates once the request is counted).
func checkLiveMatchesMetrics(t *testing.T, b *browser, url, key string, names []string) {
	t.Helper()
	m := metricsOf(t, url, key)
	var conds []string
	for _, n := range names {
		v, ok := m["nvmai_"+n+"_total"]
		if !ok {
			t.Fatalf("/metrics has no nvmai_%s_total", n)
		}
		conds = append(conds, fmt.Sprintf(`document.getElementById('total-%s').dataset.raw === '%d'`, n, v))
	}
	b.waitFor("the live totals to equal /metrics", strings.Join(conds, " && "), 5*time.Second)
	if after := metricsOf(t, url, key); fmt.Sprint(after) != fmt.Sprint(m) {
		t.Fatalf("/metrics moved while the page was read: %v → %v", m, after)
	}
}

// The page over the scripted engine with --api-key: it asks for the key,
// streams an answer (Markdown, reasoning folded, a code block with a copy
// button), keeps Shift+Enter as a new line, stops a slow reply with Esc
// (the server stops generating), switches models, shows live numbers equal
// to /metrics', escapes markup in text, code and tool arguments, and fits
// a phone's width.
func TestBrowserScriptedEngine(t *testing.T) {
	b := newBrowser(t)
	const key = "sekrit"
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	models := scriptedModels{ids: []string{"alpha", "beta"}, engines: &sync.Map{}}
	if err := s.SetModels(models, 0); err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(s, httpapi.Options{APIKey: key})
	openai.New(s, openai.Options{}).Mount(h)
	webui.Mount(h)
	hs := serve(t, h)

	b.do(chromedp.Navigate(hs.URL + "/"))
	b.waitFor("the API-key form", `!document.getElementById('keybar').hidden`, 5*time.Second)
	b.do(chromedp.SendKeys(chromedp.ID("apikey"), key+kb.Enter))
	b.waitFor("the models to load", `document.body.dataset.ready === '1' && document.getElementById('model').options.length === 2`, 5*time.Second)
	if got := eval[string](b, `sessionStorage.getItem('nvmai.apiKey')`); got != key {
		t.Fatalf("sessionStorage holds key %q", got)
	}

	// Shift+Enter is a new line, not a send.
	b.do(chromedp.SendKeys(chromedp.ID("input"), "line one"), chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(chromedp.ModifierShift)), chromedp.KeyEvent("line two"))
	if v := eval[string](b, `document.getElementById('input').value`); v != "line one\nline two" {
		t.Fatalf("after Shift+Enter the message box holds %q", v)
	}

	// Enter sends it; a streamed answer, rendered.
	b.do(chromedp.KeyEvent(kb.Enter))
	b.waitDone()
	reply := eval[string](b, lastReply+`.querySelector('.text:not(details .text)').textContent`)
	if !strings.Contains(reply, "Hello from alpha. Here is inline code:") {
		t.Fatalf("reply %q", reply)
	}
	for what, expr := range map[string]string{
		"bold model name":   lastReply + `.querySelector('strong').textContent === 'alpha'`,
		"a list":            lastReply + `.querySelectorAll('ul > li').length === 2`,
		"a code block":      lastReply + `.querySelector('pre.code-block code.language-go').textContent === 'fmt.Println("hi")'`,
		"a copy button":     lastReply + `.querySelector('pre.code-block button.copy') !== null`,
		"reasoning folded":  lastReply + `.querySelector('details.reasoning:not([open]) .text').textContent === 'Let me greet.'`,
		"the user's line":   `document.querySelector('#messages article.msg.user .text').textContent === 'line one\nline two'`,
		"kept in storage":   `JSON.parse(localStorage.getItem('nvmai.conversations.v1'))[0].messages.length === 2`,
		"a decode speed":    `document.getElementById('live-decode').dataset.raw > 0`,
		"a time to first":   `document.getElementById('live-ttft').dataset.raw > 0`,
		"the model in live": `document.getElementById('live-model').textContent === 'alpha'`,
	} {
		b.waitFor(what, expr, 3*time.Second)
	}

	// Esc stops a slow reply mid-way; the server stops generating.
	b.send("slow please")
	b.waitFor("the slow reply to stream", lastReply+`.querySelector('.text').textContent.length > 20 && !document.getElementById('stop').hidden`, 5*time.Second)
	b.do(chromedp.KeyEvent(kb.Escape))
	b.waitDone()
	if st := eval[string](b, `document.getElementById('status').textContent`); st != "stopped" {
		t.Fatalf("status after Esc: %q", st)
	}
	if n := len(strings.Fields(eval[string](b, lastReply+`.querySelector('.text').textContent`))); n >= 400 || n == 0 {
		t.Fatalf("the stopped reply has %d words", n)
	}
	deadline := time.Now().Add(3 * time.Second)
	for s.Activity().Generating != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the server still generates after the page stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Another model, with a temperature and no thinking (reasoning effort
	// none).
	eval[bool](b, `(() => { const m = document.getElementById('model'); m.value = 'beta'; return m.dispatchEvent(new Event('change')) })()`)
	b.do(chromedp.Click(chromedp.CSS("details.settings summary")), chromedp.SendKeys(chromedp.ID("temperature"), "0.3"))
	eval[bool](b, `(document.getElementById('effort').value = 'none') === 'none'`)
	b.send("hello again")
	b.waitDone()
	if reply := eval[string](b, lastReply+`.querySelector('.text:not(details .text)').textContent`); !strings.Contains(reply, "Hello from beta") || s.Loaded() != "beta" {
		t.Fatalf("after switching: reply %q, loaded %q", reply, s.Loaded())
	}
	beta, _ := models.engines.Load("beta")
	gens := beta.(*scriptedEngine).Generations()
	if g := gens[len(gens)-1]; g.Sampling.Temperature != 0.3 || strings.HasSuffix(decode(g.Prompt), "<think>\n") {
		t.Fatalf("the request had temperature %v and a prompt ending %q; want 0.3 and no think block", g.Sampling.Temperature, decode(g.Prompt)[max(0, len(g.Prompt)-20):])
	}
	checkLiveMatchesMetrics(t, b, hs.URL, key, []string{"prompt_tokens", "generated_tokens", "prompt_cache_reused_tokens"})
	eval[bool](b, `(document.getElementById('effort').value = '') === ''`) // thinking back on

	// Markup in a reply is shown, never run.
	b.send("xss")
	b.waitDone()
	if pwned := eval[bool](b, `window.__pwned !== undefined`); pwned {
		t.Fatal("the reply's markup ran: window.__pwned is set")
	}
	for what, expr := range map[string]string{
		"no element from the reply": `document.querySelectorAll('#messages img, #messages script, #messages [onerror]').length === 0`,
		"text shown literally":      lastReply + `.querySelector('.text:not(details .text) p').textContent === 'Text ` + jsString(scriptPayload) + ` and ` + jsString(imgPayload) + ` end.'`,
		"code shown literally":      lastReply + `.querySelector('pre.code-block code').textContent === '` + jsString(scriptPayload+imgPayload) + `'`,
		"reasoning shown literally": lastReply + `.querySelector('details.reasoning .text').textContent === 'Thinking ` + jsString(imgPayload) + `'`,
		"a tool call":               lastReply + `.querySelector('.tool-call .tool-name').textContent === 'tool call: run'`,
		"arguments literally":       `JSON.parse(` + lastReply + `.querySelector('.tool-call pre').textContent).cmd === '` + jsString(imgPayload+scriptPayload) + `'`,
		"no javascript: link":       `document.querySelectorAll('#messages a[href^="javascript"]').length === 0`,
	} {
		b.waitFor(what, expr, 3*time.Second)
	}

	// New conversation, then a phone's width: one column, nothing wider.
	b.do(chromedp.Click(chromedp.ID("new-chat")))
	b.waitFor("an empty conversation", `document.querySelectorAll('#messages article').length === 0 && JSON.parse(localStorage.getItem('nvmai.conversations.v1')).length === 2`, 3*time.Second)
	b.do(chromedp.EmulateViewport(390, 844))
	b.waitFor("the page to fit 390 px", `document.documentElement.scrollWidth <= 390 && getComputedStyle(document.getElementById('live')).display === 'none'`, 3*time.Second)
	b.do(chromedp.Click(chromedp.ID("toggle-live")))
	b.waitFor("the live panel to open", `getComputedStyle(document.getElementById('live')).display !== 'none'`, 3*time.Second)

	// The theme toggle.
	before := eval[string](b, `getComputedStyle(document.body).backgroundColor`)
	b.do(chromedp.Click(chromedp.ID("theme")))
	if after := eval[string](b, `getComputedStyle(document.body).backgroundColor`); after == before {
		t.Fatalf("the theme button left the background %s", after)
	}
}

// serve starts h on a test server; the page's live stream stays open
// until its connection is closed, so the clean-up closes connections first.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs
}

// jsString escapes s for a single-quoted JavaScript string.
func jsString(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s)
}

// The page over the embedded tiny model: a streamed answer, and the live
// panel's totals (expert cache included) equal to /metrics', with one heat
// cell per expert layer.
func TestBrowserTinyModel(t *testing.T) {
	b := newBrowser(t)
	e := adaptertest.TinyEngine(t)
	re := server.NewRuntimeEngine(e, server.RuntimeOptions{ModelID: "tiny", CacheBytes: 16 << 20, PrefillChunk: 16})
	s := server.New(server.Config{Log: func(server.RequestLog) {}, Defaults: server.Defaults{MaxTokens: 12}})
	s.SetEngine(re, server.PlainChatML{})
	h := httpapi.New(s, httpapi.Options{})
	openai.New(s, openai.Options{}).Mount(h)
	webui.Mount(h)
	hs := serve(t, h)

	b.do(chromedp.Navigate(hs.URL + "/"))
	b.waitFor("the model list", `document.body.dataset.ready === '1' && document.getElementById('model').value === 'tiny'`, 5*time.Second)
	b.send("The capital of France is")
	b.waitDone()
	if eval[string](b, lastReply+`.querySelector('.text').textContent`) == "" && eval[int](b, lastReply+`.querySelectorAll('.tool-call').length`) == 0 {
		t.Fatal("the tiny model's reply is empty on the page")
	}
	checkLiveMatchesMetrics(t, b, hs.URL, "", []string{"prompt_tokens", "generated_tokens", "prompt_cache_reused_tokens", "expert_cache_hits", "expert_cache_misses", "expert_bytes_read"})
	layers := len(e.Install.Manifest.Experts.Layers)
	b.waitFor("a heat cell per expert layer", fmt.Sprintf(`document.getElementById('heat').children.length === %d && document.getElementById('heat').dataset.layers === '%d'`, layers, layers), 3*time.Second)
	b.waitFor("the footprint", `document.querySelectorAll('#memory meter').length === 5 && document.getElementById('live-hitrate').dataset.raw !== undefined`, 3*time.Second)
}

// gpuEngine is the scripted engine as the GPU engine streaming experts
// reports itself: two layers of VRAM slots whose misses are copied over
// PCIe (one per token, 4 KiB each), and its device memory.
type gpuEngine struct {
	*scriptedEngine
	mu     sync.Mutex
	layers [2]server.ExpertLayerStats
}

func (e *gpuEngine) Generate(ctx context.Context, g server.Generation, onToken func(string) bool) (server.Outcome, error) {
	return e.scriptedEngine.Generate(ctx, g, func(s string) bool {
		e.mu.Lock()
		e.layers[0].Hits++
		e.layers[1].Misses++
		e.mu.Unlock()
		return onToken(s)
	})
}

func (e *gpuEngine) ExpertCacheStatsByLayer() (server.ExpertCacheStats, []server.ExpertLayerStats, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := server.ExpertCacheStats{PCIe: true}
	for _, l := range e.layers {
		st.Hits, st.Misses = st.Hits+l.Hits, st.Misses+l.Misses
	}
	st.BytesRead = st.Misses * 4096
	return st, slices.Clone(e.layers[:]), true
}

func (e *gpuEngine) ExpertCacheStats() (server.ExpertCacheStats, bool) {
	st, _, ok := e.ExpertCacheStatsByLayer()
	return st, ok
}

func (e *gpuEngine) Memory() (server.Memory, bool) {
	return server.Memory{Resident: 1 << 30, ExpertSlots: 0, KV: 0, Total: 2 << 30, Device: "gpu",
		VRAM: &model.DeviceMemory{Used: 60 << 30, Total: 80 << 30, Trunk: 3 << 30, State: 1 << 30, Experts: 50 << 30, Staging: 1 << 28, Streamed: true}}, true
}

// On the GPU engine (fake) the page shows the PCIe bytes per token and in
// all (equal to /metrics'), and the VRAM rows beside the RAM ones.
func TestBrowserGPUFigures(t *testing.T) {
	b := newBrowser(t)
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	e := &gpuEngine{scriptedEngine: &scriptedEngine{id: "gpu", Engine: &servertest.Engine{Context: 8192, Script: func(prompt string) []string { return script("gpu", prompt) }}}}
	s.SetEngine(e, servertest.Renderer{})
	h := httpapi.New(s, httpapi.Options{})
	openai.New(s, openai.Options{}).Mount(h)
	webui.Mount(h)
	hs := serve(t, h)

	b.do(chromedp.Navigate(hs.URL + "/"))
	b.waitFor("the model list", `document.body.dataset.ready === '1'`, 5*time.Second)
	b.send("hello")
	b.waitDone()
	checkLiveMatchesMetrics(t, b, hs.URL, "", []string{"expert_cache_hits", "expert_cache_misses", "expert_pcie_bytes"})
	b.waitFor("the PCIe bytes per token", `document.getElementById('live-pcie').dataset.raw === '4096' && document.getElementById('live-disk').dataset.raw === undefined`, 3*time.Second)
	b.waitFor("the VRAM rows", `document.querySelectorAll('#memory meter').length === 10 && document.getElementById('memory').textContent.includes('VRAM expert slots')`, 3*time.Second)
}
