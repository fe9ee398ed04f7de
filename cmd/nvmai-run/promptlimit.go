package main

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/nvmai/nvmai/pkg/cliutil"
)

// promptChunk is how much prompt text is tokenized between two looks at the
// context (Ctrl-C) and at the running count: tens of milliseconds of work.
const promptChunk = 64 << 10

// promptWithinContext refuses, before the exact tokenization, a prompt text
// far over the context limit, and honours Ctrl-C (ctx) while it looks. It
// counts the tokens of the text a chunk at a time and stops once the count
// is over twice the limit: so a 64 MiB --prompt-file of binary costs the
// work and memory of a few chunks, not of 64 MiB of tokens (about 3 GiB).
// A text that passes is then tokenized whole as before, so its tokens do
// not depend on where the chunks fell; being under twice the limit, that is
// bounded work too. (The chunked count can differ from the exact one by a
// few tokens at each chunk boundary, hence the margin: the exact count
// decides against the limit.) A text of no more bytes than that margin is
// left to the exact tokenization at once: each token covers at least one
// byte, so it is bounded work, and a short prompt is not tokenized twice.
func promptWithinContext(ctx context.Context, encode func(string) []int, text string, limit int) error {
	stopAbove := 2*limit + 1024
	if limit <= 0 || len(text) <= stopAbove {
		return nil
	}
	n := 0
	for rest := text; rest != ""; {
		if ctx.Err() != nil {
			return &cliutil.InterruptedError{Msg: "interrupted while tokenizing the prompt"}
		}
		chunk := nextChunk(rest, promptChunk)
		rest = rest[len(chunk):]
		n += len(encode(chunk))
		if n > stopAbove && rest != "" {
			return cliutil.Usagef("the prompt has more than %d tokens in its first %s (of %s), far more than the context limit of %d tokens; shorten the prompt or raise --max-context",
				n, cliutil.Bytes(int64(len(text)-len(rest))), cliutil.Bytes(int64(len(text))), limit)
		}
	}
	return nil
}

// nextChunk is the head of s of about size bytes, ending after a newline or
// a space where one falls in its second half, and never inside a UTF-8
// sequence, so chunks tokenize close to the way the whole text does.
func nextChunk(s string, size int) string {
	if len(s) <= size {
		return s
	}
	head := s[:size]
	if i := strings.LastIndexByte(head, '\n'); i >= size/2 {
		return s[:i+1]
	}
	if i := strings.LastIndexByte(head, ' '); i >= size/2 {
		return s[:i+1]
	}
	end := size
	for end > size-utf8.UTFMax && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}
