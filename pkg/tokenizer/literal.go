package tokenizer

import (
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// EncodeText is Encode with no added token matched: every character of text,
// "<|im_end|>" included, is ordinary text for the BPE model. It is for text a
// person typed, which must not be able to close its own turn or open another
// (transformers' split_special_tokens=True, extended to non-special added
// tokens such as <think>, which also steer the model).
func (t *Tokenizer) EncodeText(text string) []int {
	if !utf8.ValidString(text) {
		text = lossyString([]byte(text))
	}
	if t.nfc {
		text = norm.NFC.String(text)
	}
	ids := make([]int, 0, len(text)/3+1)
	splitPieces(text, func(piece string) { ids = t.appendPiece(ids, piece) })
	return ids
}

// EncodeChatText is EncodeChat with each message's role and content encoded
// by EncodeText: the ChatML markers around them are control tokens, nothing
// inside them is. For contents free of added tokens it returns exactly what
// EncodeChat does.
func (t *Tokenizer) EncodeChatText(messages []Message, addGenerationPrompt bool) []int {
	var ids []int
	for _, m := range messages {
		ids = append(ids, t.Encode("<|im_start|>")...)
		ids = append(ids, t.EncodeText(m.Role+"\n"+m.Content)...)
		ids = append(ids, t.Encode("<|im_end|>\n")...)
	}
	if addGenerationPrompt {
		ids = append(ids, t.Encode("<|im_start|>assistant\n")...)
	}
	return ids
}
