package main

import (
	"context"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// promptWithinContext refuses, before the exact tokenization, a prompt text
// far over the context limit: tokenizer.EncodeLimit stops once the count
// passes the limit, so a 64 MiB --prompt-file of binary costs the work and
// memory of about limit tokens, not of 64 MiB of tokens (about 3 GiB and
// 30 s, deaf to Ctrl-C). A text of no more bytes than twice the limit
// plus 64 KiB is left to the exact tokenization at once: each token covers
// at least one byte, so that is bounded work too, a short prompt is not
// tokenized twice, and its refusal gives the exact count. Ctrl-C before the look is honoured; during it, the wait is
// bounded by the context, not the input.
const exactBelow = 64 << 10

func promptWithinContext(ctx context.Context, tok *tokenizer.Tokenizer, text string, limit int) error {
	if limit <= 0 || len(text) <= 2*limit+exactBelow {
		return nil
	}
	if ctx.Err() != nil {
		return &cliutil.InterruptedError{Msg: "interrupted while tokenizing the prompt"}
	}
	if _, over := tok.EncodeLimit(text, limit); over {
		return cliutil.Usagef("the prompt (%s) has more than %d tokens, more than the context limit of %d tokens; shorten the prompt or raise --max-context",
			cliutil.Bytes(int64(len(text))), limit, limit)
	}
	return nil
}
