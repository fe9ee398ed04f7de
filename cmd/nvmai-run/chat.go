package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// chatAction runs an interactive conversation: one session whose model
// state carries every earlier turn, so each turn only processes new tokens.
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
	out := bufio.NewWriter(os.Stdout)
	opt.OnToken = func(_ int, text string) { out.WriteString(text); out.Flush() }
	sess := e.NewSession(runtime.SessionOptions{KVInitial: c.Int("kv-initial"), MaxContext: c.Int("max-context"), KVBits: c.Int("kv-bits")})
	var prefix []tokenizer.Message
	if s := c.String("system"); s != "" {
		prefix = append(prefix, tokenizer.Message{Role: "system", Content: s})
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	fmt.Fprintln(os.Stderr, "chat: type a message and press Enter; Ctrl-D to quit")
	closing := ""
	for fmt.Fprint(os.Stderr, "> "); in.Scan(); fmt.Fprint(os.Stderr, "> ") {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		turn := closing + tokenizer.ChatPrompt(append(prefix, tokenizer.Message{Role: "user", Content: line}), true)
		prefix = nil
		res, err := sess.Generate(c.Context, e.Tokenizer.Encode(turn), opt)
		if err != nil {
			return err
		}
		out.WriteString("\n")
		out.Flush()
		printTiming(res, opt.Sampling)
		// The stop token is fed with the next turn; a turn cut short by
		// --max-tokens is closed explicitly.
		closing = "\n"
		if res.StopReason != "eos" {
			closing = "<|im_end|>\n"
		}
	}
	return in.Err()
}
