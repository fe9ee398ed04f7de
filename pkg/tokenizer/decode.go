package tokenizer

// DecodeOptions control decoding.
type DecodeOptions struct {
	// SkipSpecialTokens leaves out added tokens marked special (such as
	// <|im_end|>), as transformers' skip_special_tokens=True does.
	// Non-special added tokens such as <think> are always kept.
	SkipSpecialTokens bool
}

// Decode returns the text of ids, special tokens included. Ids the tokenizer
// does not know (such as embedding padding rows) decode to nothing. Byte
// sequences that are not valid UTF-8 become U+FFFD, one per maximal
// ill-formed subpart, as in transformers.
func (t *Tokenizer) Decode(ids []int) string {
	return t.DecodeWithOptions(ids, DecodeOptions{})
}

// DecodeWithOptions is Decode with options.
func (t *Tokenizer) DecodeWithOptions(ids []int, opts DecodeOptions) string {
	raw := make([]byte, 0, 4*len(ids)) // tokens average 3–4 bytes
	for _, id := range ids {
		raw = t.appendTokenBytes(raw, id, opts)
	}
	return lossyString(raw)
}

// appendTokenBytes appends the bytes id stands for, if any.
func (t *Tokenizer) appendTokenBytes(dst []byte, id int, opts DecodeOptions) []byte {
	if id < 0 || id >= t.idCount || (opts.SkipSpecialTokens && t.special[id]) {
		return dst
	}
	return append(dst, t.decodeBytes[t.decodeOffsets[id]:t.decodeOffsets[id+1]]...)
}

// StreamDecoder turns ids into text one at a time, for printing a generation
// as it happens. A token can end partway through a UTF-8 character (byte
// tokens of an emoji, say); Push holds such bytes back until the character
// is complete, so every string it returns is whole, valid text. The
// concatenation of every Push result and the final Flush equals Decode of
// all the ids pushed.
//
// A StreamDecoder is not safe for concurrent use.
type StreamDecoder struct {
	tok     *Tokenizer
	opts    DecodeOptions
	pending []byte // an incomplete UTF-8 sequence, at most 3 bytes
	buf     []byte
}

// NewStreamDecoder returns a StreamDecoder with the given options.
func (t *Tokenizer) NewStreamDecoder(opts DecodeOptions) *StreamDecoder {
	return &StreamDecoder{tok: t, opts: opts}
}

// Push adds one id and returns the text that is now complete: everything
// except a UTF-8 sequence that later bytes could still complete. Bytes that
// can no longer form a character come out as U+FFFD as soon as that is
// certain.
func (d *StreamDecoder) Push(id int) string {
	d.pending = d.tok.appendTokenBytes(d.pending, id, d.opts)
	return d.emit(false)
}

// Flush returns what Push held back, with an incomplete sequence at the end
// as U+FFFD, and resets the decoder for a new stream.
func (d *StreamDecoder) Flush() string {
	return d.emit(true)
}

func (d *StreamDecoder) emit(final bool) string {
	if len(d.pending) == 0 {
		return ""
	}
	var used int
	d.buf, used = appendLossyUTF8(d.buf[:0], d.pending, final)
	d.pending = d.pending[:copy(d.pending, d.pending[used:])]
	return string(d.buf)
}

// TokenBytes returns the bytes id decodes to (special tokens included), or
// nil for an id the tokenizer does not know. The slice aliases the
// tokenizer's table and must not be modified. Constrained decoding uses it
// to test which tokens a grammar can accept.
func (t *Tokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= t.idCount {
		return nil
	}
	return t.decodeBytes[t.decodeOffsets[id]:t.decodeOffsets[id+1]:t.decodeOffsets[id+1]]
}
