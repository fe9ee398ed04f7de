// Package tokenizer is the byte-level BPE tokenizer of Qwen3.5, read from a
// Hugging Face tokenizer.json (and tokenizer_config.json for the chat
// template). It reproduces the tokenizers library for the one structure these
// checkpoints use, specified in qwen35-architecture.md §5: added tokens
// matched leftmost-longest, NFC, the Qwen split pattern (as a hand-written
// scanner), ByteLevel symbols and ranked merges. Parse refuses any other
// structure rather than tokenizing it differently from transformers.
//
// A Tokenizer is immutable after Parse and safe for concurrent use.
package tokenizer

// Tokenizer encodes text to token ids and decodes ids to text.
type Tokenizer struct {
	bpe bpeModel

	// rawAdded matches added tokens with normalized=false on the raw text;
	// normalizedAdded matches those with normalized=true on the NFC text.
	rawAdded, normalizedAdded addedMatcher
	nfc                       bool

	// idCount is one more than the largest id the tokenizer knows.
	idCount int
	// decodeBytes[decodeOffsets[id]:decodeOffsets[id+1]] are the bytes id
	// decodes to; ids the tokenizer does not know have none.
	decodeBytes   []byte
	decodeOffsets []uint32
	// maxTokenBytes is the most bytes any one id decodes to: a text of n
	// bytes has at least n/maxTokenBytes tokens (EncodeLimit).
	maxTokenBytes int
	// special[id] is true for added tokens marked special.
	special []bool
	// addedIDs maps added-token contents to ids.
	addedIDs map[string]int32

	chatTemplate string

	cache pieceCache
}

// bpeModel is the ranked-merge model over byte-level symbols.
type bpeModel struct {
	// vocab maps a vocabulary string (in byte symbols) to its id.
	vocab map[string]int32
	// byteIDs[b] is the id of the single-symbol token of byte b.
	byteIDs [256]int32
	// merges maps a pair of adjacent ids to its merge.
	merges map[uint64]merge
	// ignoreMerges makes a piece that is itself in the vocabulary one token
	// without running merges (model.ignore_merges).
	ignoreMerges bool
}

// TokenID returns the id of an added token by its content (for example
// "<|im_end|>"), or of a vocabulary entry by its string as written in
// tokenizer.json (in byte symbols: " the" is "Ġthe").
func (t *Tokenizer) TokenID(content string) (int, bool) {
	if id, ok := t.addedIDs[content]; ok {
		return int(id), true
	}
	id, ok := t.bpe.vocab[content]
	return int(id), ok
}

// IsSpecial reports whether id is an added token marked special (such as
// <|im_end|>), the tokens DecodeOptions.SkipSpecialTokens leaves out.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// IDCount is one more than the largest token id the tokenizer can produce or
// decode. A model's embedding table is usually larger (padding rows); ids
// from IDCount up decode to nothing.
func (t *Tokenizer) IDCount() int { return t.idCount }

// ChatTemplate is the Jinja chat template from tokenizer_config.json, or ""
// when the config had none (or was not given). ChatPrompt does not evaluate
// it; see UsesPlainChatTemplate.
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }
