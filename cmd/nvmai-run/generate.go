package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/runtime/sample"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

func loadEngine(c *cli.Context) (*runtime.Engine, error) {
	if c.String("model") == "" {
		return nil, cliutil.Usagef("--model DIR is required (an install made by nvmai-convert or nvmai-install)")
	}
	var budget int64
	if v := c.String("ram-budget"); v != "" {
		b, err := expertcache.ParseSize(v)
		if err != nil {
			return nil, cliutil.Usagef("--ram-budget: %v", err)
		}
		budget = b
	}
	if err := checkKVFlags(c); err != nil {
		return nil, err
	}
	e, err := runtime.Load(c.String("model"), runtime.Options{Threads: c.Int("threads"), Experts: runtime.ExpertOptions{
		Budget: budget, Slots: c.Int("expert-cache-slots"), IOThreads: c.Int("io-threads"), Prefetch: prefetchFlag(c),
	}, RopeScaling: c.String("rope-scaling"), MaxContext: c.Int("max-context")})
	if err != nil {
		return nil, err
	}
	if err := reportFootprint(c, e, budget); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// prefetchFlag maps --prefetch (0 turns it off) onto ExpertOptions.Prefetch
// (0 is the default there).
func prefetchFlag(c *cli.Context) int {
	if c.IsSet("prefetch") && c.Int("prefetch") <= 0 {
		return -1
	}
	return c.Int("prefetch")
}

// generateOptions builds sampling and stopping from the flags over the
// model's own defaults.
func generateOptions(c *cli.Context, e *runtime.Engine) (runtime.GenerateOptions, error) {
	p := e.DefaultSampling()
	if c.IsSet("temperature") {
		p.Temperature = c.Float64("temperature")
	}
	if c.IsSet("top-k") {
		p.TopK = c.Int("top-k")
	}
	if c.IsSet("top-p") {
		p.TopP = c.Float64("top-p")
	}
	p.Seed = c.Uint64("seed")
	if err := p.Validate(); err != nil {
		return runtime.GenerateOptions{}, cliutil.Usagef("%v", err)
	}
	if c.Int("max-tokens") < 1 {
		return runtime.GenerateOptions{}, cliutil.Usagef("--max-tokens must be at least 1")
	}
	stops := e.EOSIDs()
	if c.Bool("chat") || c.Command.Name == "chat" {
		if id, ok := e.Tokenizer.TokenID("<|im_end|>"); ok {
			stops = append(stops, id)
		}
	}
	return runtime.GenerateOptions{MaxTokens: c.Int("max-tokens"), Sampling: p, StopIDs: stops, IgnoreEOS: c.Bool("ignore-eos")}, nil
}

func promptIDs(c *cli.Context, tok *tokenizer.Tokenizer) ([]int, error) {
	n := 0
	for _, f := range []string{"prompt", "prompt-file", "prompt-ids"} {
		if c.IsSet(f) {
			n++
		}
	}
	if n != 1 {
		return nil, cliutil.Usagef("give exactly one of --prompt, --prompt-file or --prompt-ids")
	}
	if c.IsSet("prompt-ids") {
		return parseIDs(c.String("prompt-ids"))
	}
	text := c.String("prompt")
	if c.IsSet("prompt-file") {
		raw, err := os.ReadFile(c.String("prompt-file"))
		if err != nil {
			return nil, err
		}
		text = string(raw)
	}
	if c.Bool("chat") {
		var msgs []tokenizer.Message
		if s := c.String("system"); s != "" {
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: s})
		}
		return tok.EncodeChat(append(msgs, tokenizer.Message{Role: "user", Content: text}), true), nil
	}
	return tok.Encode(text), nil
}

func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return nil, cliutil.Usagef("--prompt-ids: %q is not a token id", f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func generateAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q (did you mean --prompt?)", c.Args().First())
	}
	e, err := loadEngine(c)
	if err != nil {
		return err
	}
	defer e.Close()
	ids, err := promptIDs(c, e.Tokenizer)
	if err != nil {
		return err
	}
	opt, err := generateOptions(c, e)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if id >= e.Install.Manifest.Geometry.VocabSize {
			return cliutil.Usagef("--prompt-ids: %d is outside the vocabulary (%d)", id, e.Install.Manifest.Geometry.VocabSize)
		}
	}
	if p := c.String("logits-out"); p != "" {
		closeLogits, err := writeLogits(p, &opt)
		if err != nil {
			return err
		}
		defer closeLogits()
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if !c.Bool("json") {
		opt.OnToken = func(_ int, text string) { out.WriteString(text); out.Flush() }
	}
	sess := e.NewSession(runtime.SessionOptions{KVInitial: c.Int("kv-initial"), MaxContext: c.Int("max-context"), KVBits: c.Int("kv-bits")})
	res, err := sess.Generate(c.Context, ids, opt)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		return enc.Encode(res)
	}
	out.WriteString("\n")
	out.Flush()
	printTiming(res, opt.Sampling)
	if c.Bool("stats") {
		printStats(res)
	}
	return nil
}

func printStats(res *runtime.Result) {
	if x := res.Experts; x != nil {
		fmt.Fprintf(os.Stderr, "experts: %d hits, %d misses (hit rate %.1f%%), %s read at %s/s, %.2fs waiting on I/O | %d slots/layer, budget %s, %s I/O × %d\n",
			x.Hits, x.Misses, 100*x.HitRate, expertcache.FormatSize(x.BytesRead), expertcache.FormatSize(int64(x.ReadRate)),
			x.WaitSeconds, x.SlotsPerLayer, expertcache.FormatSize(x.BudgetBytes), x.IOMode, x.IOThreads)
		if x.Prefetched > 0 {
			fmt.Fprintf(os.Stderr, "experts read ahead on a guess: %d (%s), %d of them then used (counted as hits)\n",
				x.Prefetched, expertcache.FormatSize(x.PrefetchBytes), x.PrefetchHits)
		}
	}
	fmt.Fprintf(os.Stderr, "peak RSS: %s\n", expertcache.FormatSize(res.PeakRSS))
}

func printTiming(res *runtime.Result, p sample.Params) {
	mode := "greedy"
	if p.Temperature > 0 {
		mode = fmt.Sprintf("temperature %g top-k %d top-p %g seed %d", p.Temperature, p.TopK, p.TopP, p.Seed)
	}
	fmt.Fprintf(os.Stderr, "prefill: %d tokens, %.1f tok/s | decode: %d tokens, %.1f tok/s | %s | stop: %s\n",
		len(res.PromptIDs), res.PrefillTokS, len(res.IDs), res.DecodeTokS, mode, res.StopReason)
}

// writeLogits streams each generated token's distribution to path.
func writeLogits(path string, opt *runtime.GenerateOptions) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var buf []byte
	opt.OnLogits = func(row []float32) error {
		buf = buf[:0]
		for _, v := range row {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
		_, err := w.Write(buf)
		return err
	}
	return func() error {
		if err := w.Flush(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}, nil
}
