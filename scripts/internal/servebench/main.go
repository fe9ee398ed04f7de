// Command servebench measures nvmai-run serve against a running server on
// loopback:
//
//	overhead: decode rate of streamed /v1/completions vs `nvmai-run --json`
//	          on the same prompt and token count, runs interleaved;
//	ttft:     time to first token of a second chat turn that reuses a long
//	          prefix (prompt cache) vs the same turn with the prefix changed
//	          in its first token (cold), interleaved;
//	parallel: -streams requests sent at once to a server started with
//	          --parallel against the same requests one after another,
//	          interleaved: aggregate tok/s and each stream's own decode rate;
//	equal:    the tokens a /v1/completions request is served equal those
//	          `nvmai-run --json` generates for the same prompt, sampling and
//	          seed (greedy and sampled), each request sent twice (the second
//	          may resume from the prompt cache).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

func main() {
	mode := flag.String("mode", "overhead", "overhead, ttft, parallel or equal")
	streams := flag.Int("streams", 4, "requests at once (parallel)")
	base := flag.String("url", "http://127.0.0.1:8080", "server URL")
	runBin := flag.String("nvmai-run", "bin/nvmai-run", "nvmai-run binary (overhead mode)")
	model := flag.String("model", "", "install dir (overhead mode: for nvmai-run)")
	runs := flag.Int("runs", 5, "interleaved pairs")
	tokens := flag.Int("tokens", 64, "tokens generated per run (overhead)")
	prefix := flag.Int("prefix-words", 3000, "words of the shared system prompt (ttft)")
	extra := flag.String("run-flags", "", "extra flags for nvmai-run, space separated (same engine flags as the server)")
	fresh := flag.Bool("fresh-server", false, "overhead: start a fresh server (nvmai-run serve -model … -run-flags …, port from -url) for every pair, so that it starts as cold as nvmai-run does")
	flag.Parse()
	freshServer = *fresh
	var err error
	switch *mode {
	case "overhead":
		err = overhead(*base, *runBin, *model, *runs, *tokens, strings.Fields(*extra))
	case "ttft":
		err = ttft(*base, *runs, *prefix)
	case "equal":
		err = equal(*base, *runBin, *model, *tokens, strings.Fields(*extra))
	case "parallel":
		err = parallel(*base, *runs, *streams, *tokens)
	default:
		err = fmt.Errorf("unknown -mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "servebench:", err)
		os.Exit(1)
	}
}

const prompt = "The history of the printing press begins"

var freshServer bool

// startServer runs `nvmai-run serve` on base's port and waits until it is
// ready; the returned func stops it.
func startServer(base, runBin, model string, extra []string) (func(), error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(runBin, append([]string{"serve", "--model", model, "--port", u.Port(), "--prompt-cache", "0"}, extra...)...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }
	for range 600 {
		if resp, err := http.Get(base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return stop, nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	return nil, fmt.Errorf("the server did not become ready")
}

func overhead(base, runBin, model string, runs, tokens int, extra []string) error {
	var ratio, clientRatio, works []float64
	for i := range runs {
		c, err := cliRate(runBin, model, tokens, extra)
		if err != nil {
			return err
		}
		stop := func() {}
		if freshServer {
			if stop, err = startServer(base, runBin, model, extra); err != nil {
				return err
			}
		}
		s, cl, work, n, err := serverRate(base, tokens)
		stop()
		if err != nil {
			return err
		}
		ratio, works = append(ratio, s/c), append(works, work)
		line := fmt.Sprintf("pair %d: nvmai-run %.2f tok/s, server %.2f tok/s (%d tokens), server/cli %.4f; server's own per-token work %.3f%% of decode", i+1, c, s, n, s/c, 100*work)
		if cl > 0 {
			clientRatio = append(clientRatio, cl/c)
			line += fmt.Sprintf("; seen by the client %.2f tok/s (%.4f)", cl, cl/c)
		}
		fmt.Println(line)
	}
	report("server-side decode vs nvmai-run", ratio)
	slices.Sort(works)
	fmt.Printf("server's own per-token work (stop strings, parsing, encoding, writing SSE): median %.3f%% of decode time (range %.3f%% … %.3f%%)\n",
		100*works[len(works)/2], 100*works[0], 100*works[len(works)-1])
	if len(clientRatio) > 0 {
		report("client-side stream", clientRatio)
	}
	return nil
}

func report(what string, ratio []float64) {
	slices.Sort(ratio)
	fmt.Printf("overhead per token (%s): median %.2f%% (range %.2f%% … %.2f%%) over %d interleaved pairs\n",
		what, 100*(1/ratio[len(ratio)/2]-1), 100*(1/ratio[len(ratio)-1]-1), 100*(1/ratio[0]-1), len(ratio))
}

// cliRate is nvmai-run's own decode rate (it excludes load and prefill).
func cliRate(runBin, model string, tokens int, extra []string) (float64, error) {
	args := append([]string{"--model", model, "--prompt", prompt, "--max-tokens", fmt.Sprint(tokens), "--temperature", "0", "--ignore-eos", "--json"}, extra...)
	out, err := exec.Command(runBin, args...).Output()
	if err != nil {
		return 0, fmt.Errorf("nvmai-run: %v", err)
	}
	var r struct {
		DecodeTokS float64 `json:"decode_tok_s"`
		IDs        []int   `json:"ids"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, err
	}
	return r.DecodeTokS, nil
}

// serverRate streams a completion and returns the server's decode rate
// (its "timings", measured like nvmai-run's: steps after the first token
// over the decode time, which includes the server's per-token work: stop
// strings, parsing, encoding and writing each SSE chunk) and the rate the
// client saw between its first and last text chunk (0 when the model's
// tokens decode to no text, as a synthetic install's mostly do).
func serverRate(base string, tokens int) (server, client, work float64, n int, err error) {
	return serverRateOf(base, prompt, tokens)
}

// serverRateOf is serverRate for prompt p.
func serverRateOf(base, p string, tokens int) (server, client, work float64, n int, err error) {
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`, p, tokens)
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer resp.Body.Close()
	var first, last time.Time
	chunks := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || !strings.HasPrefix(line, "{") {
			continue
		}
		var v struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				Completion int `json:"completion_tokens"`
			} `json:"usage"`
			Timings *struct {
				PredictedPerSecond float64 `json:"predicted_per_second"`
				PredictedMS        float64 `json:"predicted_ms"`
				ServerMS           float64 `json:"server_ms"`
			} `json:"timings"`
		}
		if json.Unmarshal([]byte(line), &v) != nil {
			continue
		}
		if v.Usage != nil && v.Timings != nil {
			n, server = v.Usage.Completion, v.Timings.PredictedPerSecond
			if v.Timings.PredictedMS > 0 {
				work = v.Timings.ServerMS / v.Timings.PredictedMS
			}
		}
		if len(v.Choices) > 0 && v.Choices[0].Text != "" {
			if chunks == 0 {
				first = time.Now()
			}
			last = time.Now()
			chunks++
		}
	}
	if n < 2 {
		return 0, 0, 0, n, fmt.Errorf("the server generated %d tokens (status %d)", n, resp.StatusCode)
	}
	if chunks >= n/2 && last.After(first) {
		client = float64(n-1) / last.Sub(first).Seconds()
	}
	return server, client, work, n, nil
}

func ttft(base string, runs, words int) error {
	var warm, cold []float64
	var cached int
	var promptTokens int
	for i := range runs {
		system := longText(words, i)
		turn1 := []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": "Summarise the text above."}}
		reply, _, _, _, err := chat(base, turn1)
		if err != nil {
			return err
		}
		turn2 := append(turn1, map[string]string{"role": "assistant", "content": reply}, map[string]string{"role": "user", "content": "Now in one word."})
		_, w, c, p, err := chat(base, turn2)
		if err != nil {
			return err
		}
		// Cold: the same conversation with its very first word changed, so
		// no cached prefix applies.
		coldTurn := slices.Clone(turn2)
		coldTurn[0] = map[string]string{"role": "system", "content": "Cold " + system}
		_, k, _, _, err := chat(base, coldTurn)
		if err != nil {
			return err
		}
		warm, cold, cached, promptTokens = append(warm, w), append(cold, k), c, p
		fmt.Printf("pair %d: second turn TTFT %.3fs reusing %d of %d prompt tokens; cold %.3fs; speed-up %.1f×\n", i+1, w, c, p, k, k/w)
	}
	slices.Sort(warm)
	slices.Sort(cold)
	fmt.Printf("TTFT second turn (reusing %d of %d tokens): median %.3fs (range %.3f … %.3f); cold median %.3fs (range %.3f … %.3f); speed-up %.1f×\n",
		cached, promptTokens, warm[len(warm)/2], warm[0], warm[len(warm)-1], cold[len(cold)/2], cold[0], cold[len(cold)-1], cold[len(cold)/2]/warm[len(warm)/2])
	return nil
}

func longText(words, salt int) string {
	vocab := strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards quietly hum old songs about rivers mountains and distant cities")
	var b strings.Builder
	fmt.Fprintf(&b, "Document %d.", salt)
	for i := range words {
		b.WriteString(" " + vocab[(i*7+salt)%len(vocab)])
	}
	return b.String()
}

// chat streams one turn and returns the reply, the time to the first
// streamed token, and the usage's cached and prompt tokens.
func chat(base string, msgs []map[string]string) (string, float64, int, int, error) {
	body, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 4, "temperature": 0, "stream": true, "stream_options": map[string]bool{"include_usage": true}})
	start := time.Now()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", 0, 0, 0, err
	}
	defer resp.Body.Close()
	var first float64
	var reply strings.Builder
	cached, prompt := 0, 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return "", 0, 0, 0, err
		}
		if c.Error != nil {
			return "", 0, 0, 0, fmt.Errorf("stream error: %s", line)
		}
		if c.Usage != nil {
			cached, prompt = c.Usage.Details.Cached, c.Usage.PromptTokens
		}
		for _, ch := range c.Choices {
			for _, t := range []*string{ch.Delta.Content, ch.Delta.ReasoningContent} {
				if t != nil && *t != "" {
					if first == 0 {
						first = time.Since(start).Seconds()
					}
					reply.WriteString(*t)
				}
			}
		}
	}
	if first == 0 {
		first = time.Since(start).Seconds() // no visible token (e.g. EOS first): time to the end
	}
	return reply.String(), first, cached, prompt, sc.Err()
}

// equal compares served completions with nvmai-run's, token count and
// text, for greedy and seeded sampling; each request goes twice, the
// second resuming from the server's prompt cache where it kept a snapshot.
func equal(base, runBin, model string, tokens int, extra []string) error {
	settings := []struct {
		name string
		args []string
		body string
	}{
		{"greedy", []string{"--temperature", "0"}, `"temperature":0`},
		{"T 0.7, top-k 20, top-p 0.95, seed 7", []string{"--temperature", "0.7", "--top-k", "20", "--top-p", "0.95", "--seed", "7"}, `"temperature":0.7,"top_k":20,"top_p":0.95,"seed":7`},
		{"T 1, no filter, seed 11", []string{"--temperature", "1", "--top-k", "0", "--top-p", "1", "--seed", "11"}, `"temperature":1,"top_k":0,"top_p":1,"seed":11`},
	}
	failed := 0
	for _, st := range settings {
		args := append([]string{"--model", model, "--prompt", prompt, "--max-tokens", fmt.Sprint(tokens), "--json"}, append(st.args, extra...)...)
		out, err := exec.Command(runBin, args...).Output()
		if err != nil {
			return fmt.Errorf("nvmai-run %s: %v", strings.Join(args, " "), err)
		}
		var cli struct {
			IDs  []int  `json:"ids"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(out, &cli); err != nil {
			return err
		}
		for try := range 2 {
			body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,%s}`, prompt, tokens, st.body)
			resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				return err
			}
			var v struct {
				Choices []struct {
					Text string `json:"text"`
				} `json:"choices"`
				Usage struct {
					Completion int `json:"completion_tokens"`
					Details    struct {
						Cached int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || len(v.Choices) == 0 {
				return fmt.Errorf("completion (%s): status %d, %v", st.name, resp.StatusCode, err)
			}
			same := v.Choices[0].Text == cli.Text && v.Usage.Completion == len(cli.IDs)
			fmt.Printf("equal %s, request %d (%d prompt tokens from the cache): served %d tokens, nvmai-run %d: %s\n",
				st.name, try+1, v.Usage.Details.Cached, v.Usage.Completion, len(cli.IDs), map[bool]string{true: "same text", false: "DIFFERENT"}[same])
			if !same {
				failed++
				fmt.Printf("  served   %q\n  nvmai-run %q\n", v.Choices[0].Text, cli.Text)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d served completions differ from nvmai-run's", failed)
	}
	fmt.Println("RESULT: served tokens equal nvmai-run's")
	return nil
}

// parallel sends streams different streamed completions one after another,
// then all at once, runs times. Aggregate: every generated token over the
// wall time from the first request sent to the last token received (the
// short prompts' prefill included, on both sides). Each stream's own rate
// is its decode tok/s as the server times it (predicted_per_second: its
// steps, waits for the batch and the others' prefill passes included).
// Start the server with --parallel streams and --prompt-cache 0, so that no
// request resumes another's prompt.
func parallel(base string, runs, streams, tokens int) error {
	var aggRatio, ownRatio []float64
	for r := range runs {
		prompts := make([]string, streams)
		for i := range prompts {
			prompts[i] = fmt.Sprintf("%s (run %d, stream %d)", prompt, r+1, i+1)
		}
		alone := make([]float64, streams)
		seqTokens := 0
		t0 := time.Now()
		for i, p := range prompts {
			rate, _, _, n, err := serverRateOf(base, p, tokens)
			if err != nil {
				return err
			}
			alone[i], seqTokens = rate, seqTokens+n
		}
		seqWall := time.Since(t0).Seconds()
		type res struct {
			rate float64
			n    int
			err  error
		}
		out := make(chan res, streams)
		t1 := time.Now()
		for _, p := range prompts {
			go func() {
				rate, _, _, n, err := serverRateOf(base, p, tokens)
				out <- res{rate, n, err}
			}()
		}
		// The results come back in completion order; each stream's rate
		// is compared with the median of the rates alone (the streams are
		// alike: same length of prompt and reply).
		at := make([]float64, 0, streams)
		parTokens := 0
		for range streams {
			x := <-out
			if x.err != nil {
				return x.err
			}
			at, parTokens = append(at, x.rate), parTokens+x.n
		}
		parWall := time.Since(t1).Seconds()
		slices.Sort(at)
		sortedAlone := slices.Sorted(slices.Values(alone))
		medAlone := sortedAlone[len(sortedAlone)/2]
		seqAgg, parAgg := float64(seqTokens)/seqWall, float64(parTokens)/parWall
		aggRatio, ownRatio = append(aggRatio, parAgg/seqAgg), append(ownRatio, at[0]/medAlone)
		fmt.Printf("run %d: one after another %.2f tok/s aggregate (%d tokens in %.2fs; each stream alone %s tok/s); %d at once %.2f tok/s aggregate (%d tokens in %.2fs; each stream %s tok/s): aggregate ×%.2f, slowest stream ×%.2f its rate alone\n",
			r+1, seqAgg, seqTokens, seqWall, rates(alone), streams, parAgg, parTokens, parWall, rates(at), parAgg/seqAgg, at[0]/medAlone)
	}
	ratioReport(fmt.Sprintf("aggregate tok/s, %d at once vs one after another (acceptance: ≥ 1.5× all in RAM, ≥ 2× streamed)", streams), aggRatio)
	ratioReport("slowest stream's own decode rate at once vs alone (acceptance: ≥ 0.5×)", ownRatio)
	return nil
}

func ratioReport(what string, r []float64) {
	slices.Sort(r)
	fmt.Printf("%s: median ×%.2f (range ×%.2f … ×%.2f) over %d runs\n", what, r[len(r)/2], r[0], r[len(r)-1], len(r))
}

func rates(r []float64) string {
	s := make([]string, len(r))
	for i, x := range r {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}
