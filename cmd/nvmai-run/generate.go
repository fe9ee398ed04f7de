package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

// maxPromptFile bounds --prompt-file (and stdin): far beyond any context.
const maxPromptFile = 64 << 20

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
	stops := e.EOSIDs()
	if c.Bool("chat") || c.Command.Name == "chat" {
		if id, ok := e.Tokenizer.TokenID("<|im_end|>"); ok {
			stops = append(stops, id)
		}
	}
	return runtime.GenerateOptions{MaxTokens: c.Int("max-tokens"), Sampling: p, StopIDs: stops, IgnoreEOS: c.Bool("ignore-eos")}, nil
}

// checkPromptFlags refuses prompt flags that contradict each other, before
// the model is loaded.
func checkPromptFlags(c *cli.Context) error {
	if err := cliutil.Exclusive(c, "prompt", "prompt-file", "prompt-ids"); err != nil {
		return err
	}
	switch {
	case !c.IsSet("prompt") && !c.IsSet("prompt-file") && !c.IsSet("prompt-ids"):
		return cliutil.Usagef("no prompt: give --prompt TEXT, --prompt-file FILE or --prompt-ids IDS (or use the chat command)")
	case c.IsSet("system") && !c.Bool("chat"):
		return cliutil.Usagef("--system applies to --chat (or the chat command); add --chat")
	case c.IsSet("reasoning-effort") && !c.Bool("chat"):
		return cliutil.Usagef("--reasoning-effort applies to --chat (or the chat command); add --chat")
	case c.Bool("chat") && c.IsSet("prompt-ids"):
		return cliutil.Usagef("--prompt-ids bypasses the tokenizer, so --chat cannot wrap it; give --prompt or --prompt-file with --chat")
	}
	return nil
}

// promptText is the text of --prompt or --prompt-file ("-" reads stdin);
// one trailing newline of a file is dropped, as llama.cpp's -f does, since
// editors end every file with one.
func promptText(c *cli.Context) (string, error) {
	if !c.IsSet("prompt-file") {
		if c.String("prompt") == "" {
			return "", cliutil.Usagef("empty prompt: give --prompt TEXT")
		}
		return c.String("prompt"), nil
	}
	path := c.String("prompt-file")
	var r io.Reader = c.App.Reader
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("--prompt-file: %w", err)
		}
		defer f.Close()
		r = f
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxPromptFile+1))
	if err != nil {
		return "", fmt.Errorf("--prompt-file %s: %w", path, err)
	}
	if len(raw) > maxPromptFile {
		return "", cliutil.Usagef("--prompt-file %s is larger than %s", path, cliutil.Bytes(maxPromptFile))
	}
	text := strings.TrimSuffix(string(raw), "\n")
	text = strings.TrimSuffix(text, "\r")
	if text == "" {
		return "", cliutil.Usagef("empty prompt: --prompt-file %s holds no text", path)
	}
	return text, nil
}

func promptIDs(c *cli.Context, e *runtime.Engine, text string) ([]int, error) {
	if c.IsSet("prompt-ids") {
		return parseIDs(c.String("prompt-ids"))
	}
	if c.Bool("chat") {
		f, err := chatFormatFor(c, e.Install.Dir)
		if err != nil {
			return nil, err
		}
		return f.oneShot(e.Tokenizer, c.String("system"), text)
	}
	return e.Tokenizer.Encode(text), nil
}

// contextLimit is the context a prompt must fit: --max-context, at most
// the model's own (sessionOptions warns about the clamp later).
func contextLimit(c *cli.Context, e *runtime.Engine) int {
	modelMax, limit := e.Info().MaxContext, c.Int("max-context")
	if limit <= 0 || (modelMax > 0 && limit > modelMax) {
		return modelMax
	}
	return limit
}

func parseIDs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, cliutil.Usagef("empty prompt: give --prompt-ids 1,2,3")
	}
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

// checkIDs refuses token ids outside the model's vocabulary.
func checkIDs(e *runtime.Engine, ids []int) error {
	for _, id := range ids {
		if id >= e.Install.Manifest.Geometry.VocabSize {
			return cliutil.Usagef("--prompt-ids: %d is outside the vocabulary (%d)", id, e.Install.Manifest.Geometry.VocabSize)
		}
	}
	return nil
}

func generateAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q (did you mean --prompt?)", c.Args().First())
	}
	if err := checkPromptFlags(c); err != nil {
		return err
	}
	var text string
	if !c.IsSet("prompt-ids") {
		var err error
		if text, err = promptText(c); err != nil {
			return err
		}
	}
	e, err := loadEngine(c)
	if err != nil {
		return err
	}
	defer e.Close()
	if err := promptWithinContext(c.Context, e.Tokenizer, text, contextLimit(c, e)); err != nil {
		return err
	}
	ids, err := promptIDs(c, e, text)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return cliutil.Usagef("empty prompt: the prompt encodes to no tokens; give --prompt TEXT")
	}
	opt, err := generateOptions(c, e)
	if err != nil {
		return err
	}
	if err := checkIDs(e, ids); err != nil {
		return err
	}
	var logits *logitsFile
	if p := c.String("logits-out"); p != "" {
		if logits, err = createLogits(p); err != nil {
			return err
		}
		opt.OnLogits = logits.write
	}
	err = generate(c, e, ids, opt)
	if logits != nil {
		err = logits.close(err)
	}
	return err
}

// generate runs one generation, streaming the text to stdout (or printing
// one JSON object), and the timing line to stderr. A Ctrl-C still prints
// what was generated and its timing, with stop reason "interrupted".
func generate(c *cli.Context, e *runtime.Engine, ids []int, opt runtime.GenerateOptions) error {
	out := bufio.NewWriter(c.App.Writer)
	var text strings.Builder
	opt.OnToken = func(_ int, t string) {
		text.WriteString(t)
		if !c.Bool("json") {
			out.WriteString(t)
			out.Flush()
		}
	}
	so := sessionOptions(c, e)
	modelMax := e.Info().MaxContext
	if limit := cmp.Or(so.MaxContext, modelMax); limit > 0 && len(ids) > limit {
		return cliutil.Usagef("the prompt has %d tokens, more than the context limit of %d tokens; shorten the prompt or raise --max-context (this model allows %d)",
			len(ids), limit, modelMax)
	}
	printFootprint(c, e)
	sess := e.NewSession(so)
	start := time.Now()
	res, err := sess.Generate(c.Context, ids, opt)
	interrupted := errors.Is(err, context.Canceled)
	if err != nil && !interrupted {
		return err
	}
	if interrupted {
		res = partialResult(res, ids, text.String(), time.Since(start).Seconds())
	}
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		enc.Encode(res)
	} else {
		out.WriteString("\n")
	}
	if ferr := out.Flush(); ferr != nil {
		return ferr
	}
	printTimingTo(c.App.ErrWriter, res, opt.Sampling)
	if c.Bool("stats") {
		printStatsTo(c.App.ErrWriter, res)
	}
	if interrupted {
		return &cliutil.InterruptedError{Msg: fmt.Sprintf("interrupted after %s", plural(len(res.IDs), "generated token"))}
	}
	return nil
}

// partialResult completes what Generate returned when interrupted: nothing
// during the prefill, the ids without text or decode timing during the
// decode.
func partialResult(res *runtime.Result, ids []int, text string, elapsed float64) *runtime.Result {
	if res == nil {
		res = &runtime.Result{PromptIDs: ids, IDs: []int{}, PrefillSecs: elapsed}
	}
	res.StopReason = "interrupted"
	if res.Text == "" {
		res.Text = text
	}
	if res.DecodeSecs == 0 && len(res.IDs) > 0 {
		res.DecodeSecs = max(elapsed-res.PrefillSecs, 0)
		// Interrupted between steps: every generated token was fed back.
		res.DecodeTokS = float64(len(res.IDs)) / max(res.DecodeSecs, 1e-9)
	}
	return res
}

// printStats writes the expert-cache and memory report to stderr.
func printStats(res *runtime.Result) { printStatsTo(os.Stderr, res) }

func printStatsTo(w io.Writer, res *runtime.Result) {
	if x := res.Experts; x != nil {
		fmt.Fprintf(w, "experts: %d hits, %d misses (hit rate %.1f%%), %s read at %s, %.2fs waiting on I/O | %s, budget %s, %s I/O × %d\n",
			x.Hits, x.Misses, 100*x.HitRate, cliutil.Bytes(x.BytesRead), cliutil.Rate(x.ReadRate),
			x.WaitSeconds, plural(x.SlotsPerLayer, "slot")+" per layer", cliutil.Bytes(x.BudgetBytes), x.IOMode, x.IOThreads)
		if x.Prefetched > 0 {
			fmt.Fprintf(w, "experts read ahead on a guess: %d (%s), %d of them then used (counted as hits)\n",
				x.Prefetched, cliutil.Bytes(x.PrefetchBytes), x.PrefetchHits)
		}
	}
	fmt.Fprintf(w, "peak RSS: %s\n", cliutil.Bytes(res.PeakRSS))
}

// printTiming writes the timing line to stderr.
func printTiming(res *runtime.Result, p sample.Params) { printTimingTo(os.Stderr, res, p) }

// printTimingTo writes the timing line. The decode rate is over decode
// steps: the first generated token comes from the prefill.
func printTimingTo(w io.Writer, res *runtime.Result, p sample.Params) {
	mode := "greedy"
	if p.Temperature > 0 {
		mode = fmt.Sprintf("temperature %g top-k %d top-p %g seed %d", p.Temperature, p.TopK, p.TopP, p.Seed)
	}
	steps := max(len(res.IDs)-1, 0)
	if res.StopReason == "interrupted" {
		steps = len(res.IDs)
	}
	fmt.Fprintf(w, "prefill: %s, %.1f tok/s | decode: %s (%s), %.1f tok/s | %s | stop: %s\n",
		plural(len(res.PromptIDs), "token"), res.PrefillTokS, plural(len(res.IDs), "token"), plural(steps, "step"),
		res.DecodeTokS, mode, res.StopReason)
}

// logitsFile streams each generated token's distribution to a file.
type logitsFile struct {
	path string
	f    *os.File
	w    *bufio.Writer
	buf  []byte
}

func createLogits(path string) (*logitsFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--logits-out: %w", err)
	}
	return &logitsFile{path: path, f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (l *logitsFile) write(row []float32) error {
	l.buf = l.buf[:0]
	for _, v := range row {
		l.buf = binary.LittleEndian.AppendUint32(l.buf, math.Float32bits(v))
	}
	if _, err := l.w.Write(l.buf); err != nil {
		return &cliutil.WriteError{Name: "--logits-out " + l.path, Err: err}
	}
	return nil
}

// close flushes and closes the file; a failure is the command's error
// unless an earlier one (err) came first.
func (l *logitsFile) close(err error) error {
	if ferr := l.w.Flush(); ferr != nil && err == nil {
		err = &cliutil.WriteError{Name: "--logits-out " + l.path, Err: ferr}
	}
	return cliutil.CloseFile(l.f, "--logits-out "+l.path, err)
}
