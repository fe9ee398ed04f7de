package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/peterh/liner"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// chatHelp is what /help prints; docs/commands.md carries the same text.
const chatHelp = `Enter sends the line. Commands:
  /reset     start a new conversation (the --system message is kept)
  /effort    show the reasoning effort; /effort LEVEL sets it (Qwen3.8-family templates)
  /exit      quit (also /quit, or Ctrl-D at an empty prompt)
  /help      this list
  //text     send "/text" (a message that itself starts with /)
Multi-line: a line that starts with """ opens a message, the line that ends with """ sends it.
Keys: Ctrl-C stops the reply being written (what was written stays in the conversation);
  at the prompt, or twice within a second, it quits. Up/Down: history. Left/Right, Home/End,
  Ctrl-A/E, Ctrl-W/U/K: edit. Ctrl-R: search history.`

// quitWindow is how soon a second Ctrl-C during a reply quits the chat.
const quitWindow = time.Second

var (
	// errPromptInterrupt is Ctrl-C at the prompt.
	errPromptInterrupt = errors.New("interrupted at the prompt")
	// errStopped ends a reply the user stopped with Ctrl-C.
	errStopped = errors.New("reply stopped")
	// errNotSent refuses a turn whose reason the chat has printed.
	errNotSent = errors.New("message not sent")
	// errQuitByInterrupt leaves the chat with exit status 130 and no message.
	errQuitByInterrupt = cli.Exit("", cliutil.ExitInterrupted)
)

// generator is the part of runtime.Session the chat drives.
type generator interface {
	Generate(ctx context.Context, promptIDs []int, opt runtime.GenerateOptions) (*runtime.Result, error)
	Len() int
}

// lineReader reads what the user types, one line at a time.
type lineReader interface {
	// ReadLine shows prompt and returns one line without its newline:
	// io.EOF at the end of input, errPromptInterrupt for Ctrl-C.
	ReadLine(prompt string) (string, error)
	AddHistory(line string)
	Close() error
}

// chat is one interactive conversation: a session whose model state holds
// every earlier turn, so each turn processes only its new tokens.
type chat struct {
	newSession  func() generator
	tok         *tokenizer.Tokenizer
	opt         runtime.GenerateOptions
	system      string
	maxContext  int
	in          lineReader
	intr        <-chan os.Signal
	out         *bufio.Writer // the replies
	info        io.Writer     // notices
	interactive bool          // a person at a terminal: banner, prompts
	report      func(res *runtime.Result)

	reading chan lineResult // a ReadLine still under way, which the next readLine waits for

	sess    generator
	pending int   // tokens the session will feed before the next turn (its last one)
	held    []int // the tokens the session stands for, its pending one included

	// The server core runs each turn (PrepareChat, RunChat) with the chat
	// as its engine; turnOpt is the turn's generation options, last the
	// session's result, failed the session's error.
	core    *server.Server
	turnOpt runtime.GenerateOptions
	last    *runtime.Result
	failed  error

	// Each turn renders the whole conversation as the server core does
	// (plain ChatML, or the install's template for the Qwen3.8 family) and
	// feeds what follows the text the session already holds; a rendering
	// that does not start with that text (the effort changed, or the
	// template normalised a reply) makes the session re-read the
	// conversation from the start.
	format  *chatFormat
	history []chattemplate.Message // the conversation so far, system message first
	fed     string                 // the text the session holds, its pending stop token included
}

// chatAction runs nvmai-run chat on the terminal or on piped input.
func chatAction(c *cli.Context) error {
	e, err := loadEngine(c)
	if err != nil {
		return err
	}
	defer e.Close()
	opt, err := generateOptions(c, e)
	if err != nil {
		return err
	}
	format, err := chatFormatFor(c, e.Install.Dir)
	if err != nil {
		return err
	}
	printFootprint(c, e)
	maxContext := c.Int("max-context")
	if maxContext <= 0 {
		maxContext = e.Info().MaxContext
	}
	intr := cliutil.CatchInterrupts()
	defer intr.Stop()
	interactive := term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd()))
	var in lineReader = newPipeReader(os.Stdin)
	if interactive {
		in = newTermReader()
	}
	defer in.Close()
	stats := c.Bool("stats")
	ch := &chat{
		format: format,
		newSession: func() generator {
			return e.NewSession(runtime.SessionOptions{KVInitial: c.Int("kv-initial"), MaxContext: c.Int("max-context"), KVBits: kvBits(c)})
		},
		tok: e.Tokenizer, opt: opt, system: c.String("system"), maxContext: maxContext,
		in: in, intr: intr.C, out: bufio.NewWriter(os.Stdout), info: os.Stderr, interactive: interactive,
		report: func(res *runtime.Result) {
			printTiming(res, opt.Sampling)
			if stats {
				printStats(res)
			}
		},
	}
	return ch.run(c.Context)
}

// run reads messages and answers them until the input ends or the user quits.
func (ch *chat) run(ctx context.Context) error {
	if ch.format == nil {
		ch.format = &chatFormat{} // plain ChatML
	}
	ch.core = server.New(server.Config{Log: func(server.RequestLog) {}})
	ch.core.SetEngine(ch, ch.format.renderer())
	ch.reset()
	if ch.interactive {
		fmt.Fprintln(ch.info, `chat: type a message and press Enter; """ starts a multi-line one; /help lists commands; Ctrl-D quits`)
	}
	for {
		msg, block, err := ch.readMessage(ctx)
		switch {
		case errors.Is(err, io.EOF):
			if ch.interactive {
				fmt.Fprintln(ch.info) // leave the shell's prompt on a line of its own
			}
			return nil
		case errors.Is(err, errPromptInterrupt):
			return errQuitByInterrupt
		case errors.As(err, new(*lineTooLongError)):
			fmt.Fprintf(ch.info, "(%v)\n", err)
			continue
		case err != nil:
			return err
		}
		if !block && strings.HasPrefix(msg, "/") {
			if !strings.HasPrefix(msg, "//") {
				if quit := ch.command(msg); quit {
					return nil
				}
				continue
			}
			msg = msg[1:]
		}
		if err := ch.turn(ctx, msg); err != nil {
			return err
		}
	}
}

// reset starts a new conversation.
func (ch *chat) reset() {
	ch.sess, ch.pending, ch.held = ch.newSession(), 0, nil
	ch.history, ch.fed = nil, ""
}

// templated reports whether turns are rendered with the install's template.
func (ch *chat) templated() bool { return ch.format != nil && ch.format.tmpl != nil }

// command runs one /command and reports whether the chat should end.
func (ch *chat) command(line string) (quit bool) {
	switch name, _, _ := strings.Cut(line, " "); name {
	case "/exit", "/quit":
		return true
	case "/reset":
		ch.reset()
		fmt.Fprintln(ch.info, "(new conversation)")
	case "/help":
		fmt.Fprintln(ch.info, chatHelp)
	case "/effort":
		ch.effortCommand(strings.TrimSpace(strings.TrimPrefix(line, name)))
	default:
		fmt.Fprintf(ch.info, "unknown command %s; /help lists them (start a message with // to send a leading /)\n", name)
	}
	return false
}

// effortCommand shows or sets the reasoning effort.
func (ch *chat) effortCommand(arg string) {
	if !ch.templated() {
		fmt.Fprintln(ch.info, "(this model's chat template has no reasoning effort)")
		return
	}
	if arg == "" {
		fmt.Fprintf(ch.info, "(reasoning effort %s; the template takes %s)\n", ch.format.currentEffort(), strings.Join(ch.format.tmpl.Features().ReasoningEfforts, ", "))
		return
	}
	if err := ch.format.setEffort(arg); err != nil {
		fmt.Fprintf(ch.info, "(/effort %v)\n", err)
		return
	}
	if len(ch.history) > 0 {
		fmt.Fprintf(ch.info, "(reasoning effort %s: it is stated at the head of the conversation, so the next message re-reads the conversation from the start)\n", arg)
	} else {
		fmt.Fprintf(ch.info, "(reasoning effort %s)\n", arg)
	}
}

// readMessage reads one message: a line, or a """ block of lines (block
// is then true: a block is never a command). An empty line gives an empty
// message. Ctrl-C inside a block drops the block.
func (ch *chat) readMessage(ctx context.Context) (msg string, block bool, err error) {
	line, err := ch.readLine(ctx, "> ")
	if err != nil {
		return "", false, err
	}
	line = strings.TrimSpace(line)
	if line != "" {
		ch.in.AddHistory(line)
	}
	first, ok := strings.CutPrefix(line, `"""`)
	if !ok {
		return line, false, nil
	}
	if body, closed := strings.CutSuffix(first, `"""`); closed && first != "" {
		return strings.TrimSpace(body), true, nil
	}
	lines := []string{first}
	var tooLong *lineTooLongError // a line of the block was dropped: the block is read to its end, not sent
	for {
		l, err := ch.readLine(ctx, "… ")
		if errors.Is(err, errPromptInterrupt) {
			fmt.Fprintln(ch.info, "(multi-line message dropped)")
			return "", true, nil
		}
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(ch.info, `(the input ended inside a """ message; it was not sent)`)
			return "", true, io.EOF
		}
		if errors.As(err, &tooLong) {
			lines = nil
			continue
		}
		if err != nil {
			return "", true, err
		}
		ch.in.AddHistory(l)
		if body, closed := strings.CutSuffix(strings.TrimRight(l, " \t"), `"""`); closed {
			if tooLong != nil {
				fmt.Fprintf(ch.info, "(line %d is longer than %s; the multi-line message holding it was not sent)\n", tooLong.line, cliutil.Bytes(int64(tooLong.limit)))
				return "", true, nil
			}
			return strings.TrimSpace(strings.Join(append(lines, body), "\n")), true, nil
		}
		if tooLong == nil {
			lines = append(lines, l)
		}
	}
}

type lineResult struct {
	line string
	err  error
}

// readLine reads one line while watching for a SIGINT, which on a terminal
// the line editor takes as a key but on piped input arrives as a signal. A
// read the signal overtook stays under way, and the next call takes its line.
// SIGTERM, which cancels ctx, ends the chat here too.
func (ch *chat) readLine(ctx context.Context, prompt string) (string, error) {
	if ch.reading == nil {
		got := make(chan lineResult, 1)
		go func() {
			l, err := ch.in.ReadLine(prompt)
			got <- lineResult{l, err}
		}()
		ch.reading = got
	}
	select {
	case r := <-ch.reading:
		ch.reading = nil
		return r.line, r.err
	case <-ch.intr:
		return "", errPromptInterrupt
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// turn sends one message and streams the reply. Ctrl-C stops the reply;
// the tokens written so far stay in the conversation as the assistant's
// turn, closed before the next message as a turn cut by --max-tokens is.
func (ch *chat) turn(ctx context.Context, msg string) error {
	if msg == "" {
		return nil
	}
	// A message far over the context is refused before its exact encoding,
	// which for a 64 MiB line would take gigabytes.
	if err := promptWithinContext(ctx, ch.tok, msg, ch.maxContext); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(ch.info, "(%v; the message was not sent)\n", err)
		return nil
	}
	var stop, quit atomic.Bool
	turnCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go ch.watchInterrupts(done, &stop, &quit, cancel)

	var decodeStart time.Time
	var reply strings.Builder
	msgs := ch.conversation(msg)
	req := &server.ChatRequest{Endpoint: "chat", Messages: msgs, Sampling: ch.opt.Sampling, MaxTokens: ch.opt.MaxTokens, ClampMaxTokens: true}
	if ch.format.effort != "" {
		req.Kwargs = map[string]any{"reasoning_effort": ch.format.effort}
	}
	var prompt string
	req.Tokenize = func(rendered string) ([]int, error) {
		prompt = rendered
		ids := ch.continueWith(msgs, rendered)
		if !ch.fits(len(ids)) {
			return nil, errNotSent
		}
		return slices.Concat(ch.held, ids), nil
	}
	job, err := ch.core.PrepareChat(req)
	var refused *server.Error
	switch {
	case errors.Is(err, errNotSent):
		return nil
	case errors.As(err, &refused) && refused.Kind == server.KindInvalid:
		fmt.Fprintf(ch.info, "(the chat template refuses this conversation: %v)\n", err)
		return nil
	case errors.As(err, &refused):
		fmt.Fprintf(ch.info, "(%v; the message was not sent)\n", err)
		return nil
	case err != nil:
		return err
	}
	// The rendered assistant header may open the reasoning (<think>):
	// show it, so that the reply reads as the model's turn.
	if i := strings.LastIndex(prompt, "<|im_start|>assistant\n"); i >= 0 {
		ch.out.WriteString(prompt[i+len("<|im_start|>assistant\n"):])
	}
	ch.turnOpt = ch.opt
	ch.turnOpt.OnToken = func(_ int, text string) {
		reply.WriteString(text)
		ch.out.WriteString(text)
		ch.out.Flush()
	}
	ch.turnOpt.OnStep = func() error { // not OnLogits: a GPU session would copy every row for it
		if decodeStart.IsZero() {
			decodeStart = time.Now()
		}
		if stop.Load() { // checked only between tokens: the prompt is always read whole
			return errStopped
		}
		return nil
	}
	parsed, err := job.RunChat(turnCtx, nil)
	if quit.Load() {
		return errQuitByInterrupt
	}
	if err != nil {
		return ch.genErr(err)
	}
	res := ch.last
	ch.out.WriteString("\n")
	if err := ch.out.Flush(); err != nil {
		return err
	}
	if res.StopReason == "interrupted" {
		if d := time.Since(decodeStart).Seconds(); d > 0 {
			res.DecodeTokS = float64(len(res.IDs)) / d
		}
	}
	ch.report(res)
	ch.closeTurn(res.StopReason)
	ch.recordTurn(msgs, prompt, reply.String(), parsed, res.StopReason)
	return nil
}

// genErr is the session's own error for a failed generation (the core
// wraps it for HTTP clients), else err.
func (ch *chat) genErr(err error) error {
	if ch.failed != nil {
		return ch.failed
	}
	return err
}

// conversation is the conversation so far with msg as the next user turn.
func (ch *chat) conversation(msg string) []chattemplate.Message {
	msgs := ch.history
	if len(msgs) == 0 && ch.system != "" {
		msgs = []chattemplate.Message{{Role: "system", Content: ch.system}}
	}
	return append(slices.Clip(msgs), chattemplate.Message{Role: "user", Content: msg})
}

// continueWith returns the ids of prompt, msgs rendered, that the session
// still needs. When the rendering does not continue what the session
// holds, the session is replaced by a fresh one and the whole prompt is
// returned.
func (ch *chat) continueWith(msgs []chattemplate.Message, prompt string) []int {
	if ch.fed != "" && !strings.HasPrefix(prompt, ch.fed) {
		fmt.Fprintln(ch.info, "(the chat template renders the conversation differently from what the model has read; re-reading it from the start)")
		ch.sess, ch.pending, ch.fed, ch.held = ch.newSession(), 0, "", nil
	}
	literals := []string{msgs[len(msgs)-1].Content}
	if ch.fed == "" {
		literals = nil
		for _, m := range msgs {
			if m.Role != "assistant" {
				literals = append(literals, m.Content)
			}
		}
	}
	return encodeRendered(ch.tok, prompt[len(ch.fed):], literals)
}

// recordTurn keeps the user's message and the reply in the history, and
// the text the session now holds. With the Qwen3.8 template the reply is
// kept as the server core split it (reasoning as reasoning_content, which
// the template renders back); plain ChatML renders content only, so there
// the reply stays as the model wrote it.
func (ch *chat) recordTurn(msgs []chattemplate.Message, prompt, reply string, parsed *server.ChatResult, stopReason string) {
	answer := chattemplate.Message{Role: "assistant", Content: reply}
	if ch.templated() {
		answer.Content, answer.ReasoningContent = parsed.Content, &parsed.Reasoning
	}
	ch.history = append(msgs, answer)
	ch.fed = prompt + reply
	if stopReason == "eos" {
		// The pending stop token ends the turn as the rendering's
		// <|im_end|> does: the session is fed only what follows it.
		ch.fed += "<|im_end|>"
	}
}

// Info, Tokenize and Generate make the chat the server core's engine: its
// session holds the conversation, and every prompt extends what the
// session holds (the request's Tokenize hook builds it so), so a turn
// feeds only its new tokens.
func (ch *chat) Info() server.ModelInfo {
	return server.ModelInfo{ID: "chat", Context: ch.maxContext, Sampling: ch.opt.Sampling}
}

func (ch *chat) Tokenize(text string, limit int) ([]int, bool) {
	return ch.tok.EncodeLimit(text, limit)
}

func (ch *chat) Generate(ctx context.Context, g server.Generation, onToken func(string) bool) (server.Outcome, error) {
	opt := ch.turnOpt
	opt.Sampling = g.Sampling
	// MaxTokens stays the flag's: g.MaxTokens is it clamped to the
	// context, which the session enforces itself, naming the stop
	// context_full.
	show := opt.OnToken
	opt.OnToken = func(id int, text string) {
		show(id, text)
		onToken(text) // no stop strings or tools: it never asks to stop
	}
	ch.failed = nil
	res, err := ch.sess.Generate(ctx, g.Prompt[len(ch.held):], opt)
	if errors.Is(err, errStopped) {
		res.StopReason, err = "interrupted", nil
	}
	if err != nil {
		ch.failed = err
		return server.Outcome{}, err
	}
	ch.last, ch.held = res, slices.Concat(g.Prompt, res.IDs)
	out := server.Outcome{CompletionTokens: len(res.IDs), Finish: server.FinishLength}
	switch res.StopReason {
	case "eos":
		out.Finish = server.FinishEOS
	case "interrupted":
		out.Finish = server.FinishStopped
	}
	return out, nil
}

// watchInterrupts turns Ctrl-C during a reply into a stop and a second one
// within quitWindow into quitting (cancelling a prompt still being read).
func (ch *chat) watchInterrupts(done <-chan struct{}, stop, quit *atomic.Bool, cancel func()) {
	var last time.Time
	for {
		select {
		case <-done:
			return
		case <-ch.intr:
			if stop.Swap(true) && time.Since(last) < quitWindow {
				quit.Store(true)
				cancel()
				return
			}
			last = time.Now()
		}
	}
}

// closeTurn records what the session holds unfed after the reply: the
// last token of a turn that ended by itself (the stop token, or the token
// that reached --max-tokens or the context); a stopped turn has fed
// everything it showed. The next rendering closes the turn: after a stop
// token only its newline is new, otherwise <|im_end|> too.
func (ch *chat) closeTurn(reason string) {
	ch.pending = 1
	if reason == "interrupted" {
		ch.pending = 0
	}
	if reason == "context_full" {
		fmt.Fprintf(ch.info, "(the conversation has filled the context of %d tokens; /reset starts a new one, or raise --max-context)\n", ch.maxContext)
	}
}

// fits reports whether a turn of n tokens fits the context with room for
// one token of the reply (the server core refuses a prompt that fills the
// context), and says what to do when it does not, instead of ending the chat.
func (ch *chat) fits(n int) bool {
	held := ch.sess.Len() + ch.pending
	if held+n < ch.maxContext {
		return true
	}
	if n >= ch.maxContext {
		fmt.Fprintf(ch.info, "(this message is %d tokens, more than the context limit of %d; shorten it or raise --max-context)\n", n, ch.maxContext)
	} else if held >= ch.maxContext {
		fmt.Fprintf(ch.info, "(the conversation fills the context of %d tokens; /reset starts a new conversation, or raise --max-context)\n", ch.maxContext)
	} else {
		fmt.Fprintf(ch.info, "(the conversation holds %d of %d tokens and this message needs %d more; /reset starts a new conversation, or raise --max-context)\n", held, ch.maxContext, n)
	}
	return false
}

// termReader edits lines on a terminal (github.com/peterh/liner): cursor
// keys, history, Ctrl-C as a key while the prompt is shown.
type termReader struct{ l *liner.State }

func newTermReader() *termReader {
	l := liner.NewLiner()
	l.SetCtrlCAborts(true)
	l.SetMultiLineMode(true)
	return &termReader{l}
}

func (r *termReader) ReadLine(prompt string) (string, error) {
	line, err := r.l.Prompt(prompt)
	if errors.Is(err, liner.ErrPromptAborted) {
		return "", errPromptInterrupt
	}
	return line, err
}

func (r *termReader) AddHistory(line string) { r.l.AppendHistory(line) }
func (r *termReader) Close() error           { return r.l.Close() }

// pipeReader reads piped input: no prompt, no editing, lines of any length
// up to limit bytes (maxPromptFile, the same as --prompt-file). A longer
// line is read to its end and dropped with a *lineTooLongError, so the
// conversation goes on with the next line.
type pipeReader struct {
	r     *bufio.Reader
	limit int
	lines int64 // lines read so far, for the line number a notice gives
}

// lineTooLongError is a piped line over the reader's limit; it was not sent.
type lineTooLongError struct {
	line  int64
	limit int
}

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("line %d is longer than %s; it was not sent", e.line, cliutil.Bytes(int64(e.limit)))
}

func newPipeReader(r io.Reader) *pipeReader { return newPipeReaderLimit(r, maxPromptFile) }

func newPipeReaderLimit(r io.Reader, limit int) *pipeReader {
	return &pipeReader{r: bufio.NewReaderSize(r, 64<<10), limit: limit}
}

func (r *pipeReader) ReadLine(string) (string, error) {
	var line []byte
	read, tooLong := false, false
	for {
		chunk, err := r.r.ReadSlice('\n')
		read = read || len(chunk) > 0
		content := bytes.TrimSuffix(chunk, []byte("\n"))
		if !tooLong && len(line)+len(content) > r.limit+1 {
			tooLong, line = true, nil // beyond the limit even if the last byte is a \r
		}
		if !tooLong {
			line = append(line, content...)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil && !errors.Is(err, io.EOF):
			return "", err
		case !read:
			return "", io.EOF
		}
		r.lines++
		line = bytes.TrimSuffix(line, []byte("\r"))
		if tooLong || len(line) > r.limit {
			return "", &lineTooLongError{line: r.lines, limit: r.limit}
		}
		return string(line), nil
	}
}

func (r *pipeReader) AddHistory(string) {}
func (r *pipeReader) Close() error      { return nil }
