package blocks

import "fmt"

// CheckForward checks a Forward's arguments before anything changes: ids
// are tokens of a vocab-row vocabulary, logits (when non-nil) holds one row
// for every token when allLogits, else one, and the tokens fit after pos in
// maxContext. arch prefixes the errors.
func CheckForward(arch string, ids []int, logits []float32, allLogits bool, vocab, pos, maxContext int) error {
	if len(ids) == 0 {
		return fmt.Errorf("%s: Forward: no tokens", arch)
	}
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Errorf("%s: Forward: token %d at index %d is outside the vocabulary [0, %d)", arch, id, i, vocab)
		}
	}
	if logits != nil {
		rows := 1
		if allLogits {
			rows = len(ids)
		}
		if len(logits) != rows*vocab {
			return fmt.Errorf("%s: Forward: logits has %d values, want %d rows × vocab %d = %d", arch, len(logits), rows, vocab, rows*vocab)
		}
	}
	if pos+len(ids) > maxContext {
		return fmt.Errorf("%s: Forward: %d tokens after %d would pass the state's max context of %d", arch, len(ids), pos, maxContext)
	}
	return nil
}

// Chunks cuts a Forward over tokens tokens into passes of at most chunk
// tokens (chunk > 0), walked with Next like a bufio.Scanner. It is a plain
// value that never holds the ids, so that a decode step's one-token slice
// does not escape to the heap with logits (escape analysis does not tell a
// struct's fields apart).
func Chunks(tokens int, logits []float32, allLogits bool, vocab, chunk int) Passes {
	return Passes{tokens: tokens, logits: logits, allLogits: allLogits, vocab: vocab, chunk: chunk}
}

// Passes is the walk over a Forward's passes that Chunks starts. After a
// Next that returns true, the pass is ids[Start:End], and Out the logits
// rows it fills: its own rows when allLogits, else the one row of the last
// token, which only the last pass computes; nil when logits is nil or the
// pass fills none.
type Passes struct {
	Start, End int
	Out        []float32

	tokens, vocab, chunk int
	logits               []float32
	allLogits            bool
}

// Next moves to the next pass; false after the last.
func (p *Passes) Next() bool {
	if p.End >= p.tokens {
		return false
	}
	p.Start, p.End, p.Out = p.End, min(p.End+p.chunk, p.tokens), nil
	switch {
	case p.logits == nil:
	case p.allLogits:
		p.Out = p.logits[p.Start*p.vocab : p.End*p.vocab]
	case p.End == p.tokens:
		p.Out = p.logits
	}
	return true
}
