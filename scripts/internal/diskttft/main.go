// Command diskttft measures what the prompt cache's disk tier buys a
// restarted server: the time to first token of an agent-shaped request
// (a long system prompt plus tool definitions, then a short user turn) sent
// to a freshly started `nvmai-run serve`,
//
//	(a) cold: over an empty --prompt-cache-dir (a full prefill), and
//	(b) warm: over a directory that an earlier server process populated
//	    with the same system+tools prefix (a disk hit),
//
// in interleaved rounds, each with a new user turn. Run by
// scripts/disk-cache-ttft.sh.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nvmai/nvmai/pkg/tokenizer"
)

func main() {
	runBin := flag.String("nvmai-run", "bin/nvmai-run", "the nvmai-run binary")
	model := flag.String("model", "", "install directory")
	work := flag.String("work", "", "scratch directory (cache directories go here)")
	tokens := flag.Int("tokens", 20000, "tokens of the system+tools prefix to aim for")
	rounds := flag.Int("rounds", 3, "interleaved cold/warm rounds")
	runFlags := flag.String("run-flags", "", "extra `nvmai-run serve` flags, space-separated")
	flag.Parse()
	if *model == "" || *work == "" {
		fmt.Fprintln(os.Stderr, "diskttft: -model and -work are required")
		os.Exit(2)
	}
	m := &measure{runBin: *runBin, model: *model, work: *work, extra: strings.Fields(*runFlags)}
	// An interrupted measurement stops the server it started.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		if s := running.Load(); s != nil {
			s.stop()
		}
		os.Exit(1)
	}()
	if err := m.run(*tokens, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "diskttft:", err)
		os.Exit(1)
	}
}

type measure struct {
	runBin, model, work string
	extra               []string
	filler              int // system-prompt paragraphs that make the prefix about -tokens long
}

func (m *measure) run(target, rounds int) error {
	warmDir := filepath.Join(m.work, "warm")
	srv, err := m.start(warmDir)
	if err != nil {
		return err
	}
	prefix, err := m.size(srv, target)
	if err != nil {
		srv.stop()
		return err
	}
	fmt.Printf("prefix: system prompt + %d tool definitions = %d tokens (%d filler paragraphs)\n", len(tools()), prefix, m.filler)
	res, err := srv.ask(m.request("Populate the cache: say one word."))
	srv.stop() // a clean shutdown finishes the queued disk writes
	if err != nil {
		return err
	}
	fmt.Printf("populate: %.1fs for %d prompt tokens (a full prefill); %s\n", res.secs, res.prompt, dirSummary(warmDir))
	var cold, warm []float64
	for i := range rounds {
		user := fmt.Sprintf("Round %d: list the tools you would use first, briefly.", i+1)
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		var got [2]result
		for _, hit := range order {
			dir := warmDir
			if !hit {
				dir = filepath.Join(m.work, fmt.Sprintf("cold-%d", i+1))
			}
			r, err := m.once(dir, user)
			if !hit {
				os.RemoveAll(dir)
			}
			if err != nil {
				return err
			}
			got[btoi(hit)] = r
		}
		c, w := got[0], got[1]
		if c.text != w.text {
			return fmt.Errorf("round %d: the disk hit answered %q, the full prefill %q", i+1, w.text, c.text)
		}
		if c.cached != 0 || w.cached < prefix/2 {
			return fmt.Errorf("round %d: cold reused %d tokens, warm %d (prefix %d)", i+1, c.cached, w.cached, prefix)
		}
		fmt.Printf("round %d: cold %.2fs (server ttft %.2fs, prefill %.1f tok/s, load %.1fs, cached 0 of %d) | disk hit %.2fs (server ttft %.2fs, load %.1fs, cached %d of %d) | %.1fx | same reply %q\n",
			i+1, c.secs, c.serverTTFT, c.serverPrefill, c.load, c.prompt, w.secs, w.serverTTFT, w.load, w.cached, w.prompt, c.secs/w.secs, w.text)
		cold, warm = append(cold, c.secs), append(warm, w.secs)
	}
	slices.Sort(cold)
	slices.Sort(warm)
	mc, mw := cold[len(cold)/2], warm[len(warm)/2]
	fmt.Printf("time to first token, fresh server, %d-token agent prefix: full prefill median %.2fs (range %.2f-%.2f); disk hit median %.2fs (range %.2f-%.2f); speed-up %.1fx (range %.1f-%.1f)\n",
		prefix, mc, cold[0], cold[len(cold)-1], mw, warm[0], warm[len(warm)-1], mc/mw, cold[0]/warm[len(warm)-1], cold[len(cold)-1]/warm[0])
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// once starts a server over dir, sends one request and stops the server.
func (m *measure) once(dir, user string) (result, error) {
	srv, err := m.start(dir)
	if err != nil {
		return result{}, err
	}
	r, err := srv.ask(m.request(user))
	srv.stop()
	r.load = srv.load
	r.serverTTFT, r.serverPrefill = srv.requestLog()
	return r, err
}

// requestLog reads the server's JSON log line of the last chat request:
// its own time to first token and prefill rate.
func (s *server) requestLog() (ttft, prefillTokS float64) {
	for _, line := range strings.Split(s.log.String(), "\n") {
		var l struct {
			Endpoint string  `json:"endpoint"`
			TTFT     float64 `json:"ttft_s"`
			Prefill  float64 `json:"prefill_tok_s"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && strings.Contains(l.Endpoint, "chat/completions") {
			ttft, prefillTokS = l.TTFT, l.Prefill
		}
	}
	return ttft, prefillTokS
}

// running is the server started last and not yet stopped.
var running atomic.Pointer[server]

type server struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	base string
	load float64 // seconds until /health answered 200
	log  *bytes.Buffer
}

func (m *measure) start(dir string) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := append([]string{"serve", "--model", m.model, "--port", fmt.Sprint(port), "--prompt-cache-dir", dir, "--log-json"}, m.extra...)
	s := &server{cmd: exec.Command(m.runBin, args...), done: make(chan struct{}), base: fmt.Sprintf("http://127.0.0.1:%d", port), log: &bytes.Buffer{}}
	s.cmd.Stderr = s.log
	t0 := time.Now()
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	running.Store(s)
	for range 3000 {
		if resp, err := http.Get(s.base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.load = time.Since(t0).Seconds()
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("the server exited:\n%s", s.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.stop()
	return nil, fmt.Errorf("the server did not become ready:\n%s", s.log)
}

// stop interrupts the server and waits until it has exited (after its
// queued disk writes).
func (s *server) stop() {
	s.cmd.Process.Signal(os.Interrupt)
	<-s.done
	running.CompareAndSwap(s, nil)
}

type result struct {
	secs, load     float64
	serverTTFT     float64 // the server's own measure, from its request log
	serverPrefill  float64 // tokens/s of the part it prefilled
	prompt, cached int
	text           string
}

// ask sends a non-streamed request for one token: the time until the
// reply is the time to the first token.
func (s *server) ask(body []byte) (result, error) {
	t0 := time.Now()
	resp, err := http.Post(s.base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	secs := time.Since(t0).Seconds()
	if err != nil {
		return result{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return result{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, raw)
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) == 0 {
		return result{}, fmt.Errorf("reply %s: %v", raw, err)
	}
	return result{secs: secs, prompt: out.Usage.PromptTokens, cached: out.Usage.Details.Cached, text: out.Choices[0].Message.Content}, nil
}

// size picks the filler so that the rendered system+tools prefix is about
// target tokens, counting with the install's tokenizer over the server's
// own rendering (/apply-template), and returns the prefix's length.
func (m *measure) size(s *server, target int) (int, error) {
	tok, err := tokenizer.Load(filepath.Join(m.model, "tokenizer.json"), filepath.Join(m.model, "tokenizer_config.json"))
	if err != nil {
		return 0, err
	}
	imStart, ok := tok.TokenID("<|im_start|>")
	if !ok {
		return 0, errors.New("the tokenizer has no <|im_start|>")
	}
	// The prefix ends where the user message starts: the last <|im_start|>.
	count := func(filler int) (int, error) {
		m.filler = filler
		var req map[string]any
		json.Unmarshal(m.request("x"), &req)
		req["add_generation_prompt"] = false
		body, _ := json.Marshal(req)
		resp, err := http.Post(s.base+"/apply-template", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Prompt string `json:"prompt"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || out.Prompt == "" {
			return 0, fmt.Errorf("/apply-template answered HTTP %d: %s", resp.StatusCode, raw)
		}
		ids := tok.Encode(out.Prompt)
		for i := len(ids) - 1; i >= 0; i-- {
			if ids[i] == imStart {
				return i, nil
			}
		}
		return 0, errors.New("the rendered prompt has no <|im_start|>")
	}
	base, err := count(0)
	if err != nil {
		return 0, err
	}
	one, err := count(1)
	if err != nil {
		return 0, err
	}
	per := max(one-base, 1)
	return count(max(0, (target-base+per/2)/per))
}

// request is the agent-shaped chat request: the system prompt (m.filler
// paragraphs of coding-agent rules), the tool definitions, and user.
func (m *measure) request(user string) []byte {
	var sys strings.Builder
	sys.WriteString("You are a coding agent working in a user's repository. Follow the rules below exactly.\n")
	for i := range m.filler {
		fmt.Fprintf(&sys, "\n## Rule %d\n%s\n", i+1, rule(i))
	}
	body, _ := json.Marshal(map[string]any{
		"messages":    []map[string]string{{"role": "system", "content": sys.String()}, {"role": "user", "content": user}},
		"tools":       tools(),
		"max_tokens":  1,
		"temperature": 0,
	})
	return body
}

func rule(i int) string {
	parts := []string{
		"Read the relevant files before editing; never guess an API you can look up.",
		"Keep changes minimal and focused on the task; do not reformat unrelated code.",
		"Run the tests of the packages you touch and report failures verbatim.",
		"Prefer the project's existing helpers over new dependencies.",
		"When a command fails, read its error output before retrying with changes.",
		"Never delete files you did not create; ask before destructive operations.",
		"Explain briefly what you changed and why, citing file paths and line numbers.",
	}
	return fmt.Sprintf("%s %s (rule %d applies to step %d of every task.)", parts[i%len(parts)], parts[(i*3+1)%len(parts)], i+1, i%9+1)
}

// tools are coding-agent tool definitions, as Claude Code or Codex send them.
func tools() []map[string]any {
	names := []string{"read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "run_shell", "run_tests", "git_diff", "git_log", "web_fetch", "todo_write", "ask_user", "spawn_agent", "notebook_edit", "search_symbols"}
	var out []map[string]any
	for i, n := range names {
		out = append(out, map[string]any{"type": "function", "function": map[string]any{
			"name":        n,
			"description": fmt.Sprintf("%s: performs the %s operation in the workspace. Use it when the task needs it; results are returned as text. Tool %d of %d.", n, strings.ReplaceAll(n, "_", " "), i+1, len(names)),
			"parameters": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"path":    map[string]any{"type": "string", "description": "a path relative to the workspace root"},
					"pattern": map[string]any{"type": "string", "description": "a glob or regular expression, when the tool searches"},
					"timeout": map[string]any{"type": "integer", "description": "seconds before the tool gives up"},
				},
				"required": []string{"path"},
			},
		}})
	}
	return out
}

// dirSummary counts the cache directory's entry files and bytes.
func dirSummary(dir string) string {
	des, _ := os.ReadDir(dir)
	n, bytes := 0, int64(0)
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".nvpc") {
			if info, err := de.Info(); err == nil {
				n, bytes = n+1, bytes+info.Size()
			}
		}
	}
	return fmt.Sprintf("the cache directory holds %d entries, %.1f MiB", n, float64(bytes)/(1<<20))
}
