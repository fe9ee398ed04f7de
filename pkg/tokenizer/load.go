package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/text/unicode/norm"

	"github.com/nvmai/nvmai/pkg/limits"
)

// FormatError reports a tokenizer file nvmai cannot use: malformed, or a
// structure other than the one Qwen3.5 ships.
type FormatError struct {
	File  string // the file's path, or its usual name when parsed from bytes
	Field string // JSON path of the offending value, e.g. "model.merges[12]"
	Msg   string
}

func (e *FormatError) Error() string {
	if e.Field == "" {
		return e.File + ": " + e.Msg
	}
	return e.File + ": " + e.Field + ": " + e.Msg
}

// Load reads tokenizer.json and tokenizer_config.json from disk and parses
// them as Parse does. tokenizerConfigPath may be "" when there is no config;
// the tokenizer then has no chat template.
func Load(tokenizerJSONPath, tokenizerConfigPath string) (*Tokenizer, error) {
	tokJSON, err := readBounded(tokenizerJSONPath, limits.TokenizerJSON)
	if err != nil {
		return nil, err
	}
	var cfg []byte
	if tokenizerConfigPath != "" {
		if cfg, err = readBounded(tokenizerConfigPath, limits.SnapshotJSON); err != nil {
			return nil, err
		}
	}
	return parse(tokenizerJSONPath, tokJSON, tokenizerConfigPath, cfg)
}

// Parse builds a Tokenizer from the contents of tokenizer.json and
// tokenizer_config.json. tokenizerConfig may be nil when there is no config.
func Parse(tokenizerJSON, tokenizerConfig []byte) (*Tokenizer, error) {
	return parse("tokenizer.json", tokenizerJSON, "tokenizer_config.json", tokenizerConfig)
}

func parse(jsonName string, tokJSON []byte, cfgName string, cfg []byte) (*Tokenizer, error) {
	if len(tokJSON) > limits.TokenizerJSON {
		return nil, &FormatError{File: jsonName, Msg: fmt.Sprintf("%d bytes is more than the %d-byte limit for tokenizer.json", len(tokJSON), limits.TokenizerJSON)}
	}
	if len(cfg) > limits.SnapshotJSON {
		return nil, &FormatError{File: cfgName, Msg: fmt.Sprintf("%d bytes is more than the %d-byte limit for tokenizer_config.json", len(cfg), limits.SnapshotJSON)}
	}
	t, err := (&jsonParser{file: jsonName}).tokenizer(tokJSON)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		if err := (&jsonParser{file: cfgName}).config(cfg, t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// readBounded reads a whole file, refusing one larger than limit.
func readBounded(path string, limit int64) ([]byte, error) {
	data, err := limits.ReadFile(path, limit)
	var tl *limits.TooLargeError
	if errors.As(err, &tl) {
		return nil, &FormatError{File: path, Msg: fmt.Sprintf("%d bytes is more than the %d-byte limit for %s", tl.Size, limit, filepath.Base(path))}
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return data, nil
}

// jsonParser carries the file name every error names.
type jsonParser struct{ file string }

func (p *jsonParser) errorf(field, format string, args ...any) error {
	return &FormatError{File: p.file, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// syntaxError turns an encoding/json error into a FormatError that gives
// the byte offset where one is known.
func (p *jsonParser) syntaxError(field string, err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return p.errorf(field, "invalid JSON at byte %d: %v", syn.Offset, err)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return p.errorf(field, "JSON %s where %s was expected (byte %d)", typ.Value, typ.Type, typ.Offset)
	}
	return p.errorf(field, "%v", err)
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// object decodes raw as a JSON object with a string "type" field.
func (p *jsonParser) object(field string, raw json.RawMessage) (string, map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return "", nil, p.errorf(field, "must be a JSON object, found %.40s", raw)
	}
	var typ string
	if err := json.Unmarshal(obj["type"], &typ); err != nil {
		return "", nil, p.errorf(field+".type", "must be a string, found %.40s", obj["type"])
	}
	return typ, obj, nil
}

// optionalBool reads a boolean field, treating absent or null as def (the
// tokenizers library's serde default for that field).
func (p *jsonParser) optionalBool(field string, obj map[string]json.RawMessage, name string, def bool) (bool, error) {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return def, nil
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, p.errorf(field+"."+name, "must be true or false, found %.40s", raw)
	}
	return v, nil
}

// requireBool checks that a boolean field (absent or null meaning def) has
// the value nvmai implements.
func (p *jsonParser) requireBool(field string, obj map[string]json.RawMessage, name string, def, want bool) error {
	v, err := p.optionalBool(field, obj, name, def)
	if err != nil {
		return err
	}
	if v != want {
		return p.errorf(field+"."+name, "is %t; only %t is supported (Qwen3.5 tokenizers use %t)", v, want, want)
	}
	return nil
}

// optionalString reads a string field; absent or null is "".
func (p *jsonParser) optionalString(field string, obj map[string]json.RawMessage, name string) (string, error) {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", p.errorf(field+"."+name, "must be a string or null, found %.40s", raw)
	}
	return s, nil
}

// tokenizerJSON is the top level of tokenizer.json. The sections are kept
// raw and checked one by one so that each error names its field.
type tokenizerJSON struct {
	Version       *string         `json:"version"`
	AddedTokens   json.RawMessage `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

func (p *jsonParser) tokenizer(data []byte) (*Tokenizer, error) {
	var top tokenizerJSON
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, p.syntaxError("(top level)", err)
	}
	if top.Version != nil && *top.Version != "1.0" {
		return nil, p.errorf("version", "is %q; only tokenizer.json version 1.0 is known", *top.Version)
	}
	t := &Tokenizer{}
	var err error
	if t.nfc, err = p.normalizer(top.Normalizer); err != nil {
		return nil, err
	}
	if err := p.preTokenizer(top.PreTokenizer); err != nil {
		return nil, err
	}
	if err := p.postProcessor(top.PostProcessor); err != nil {
		return nil, err
	}
	if err := p.decoder(top.Decoder); err != nil {
		return nil, err
	}
	vocab, err := p.model(top.Model, &t.bpe)
	if err != nil {
		return nil, err
	}
	added, err := p.addedTokens(top.AddedTokens, t.bpe.vocab, len(vocab))
	if err != nil {
		return nil, err
	}
	t.buildAdded(added)
	t.buildDecodeTable(vocab, added)
	return t, nil
}

func (p *jsonParser) normalizer(raw json.RawMessage) (nfc bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	typ, _, err := p.object("normalizer", raw)
	if err != nil {
		return false, err
	}
	if typ != "NFC" {
		return false, p.errorf("normalizer.type", "is %q; only NFC or a null normalizer is supported (Qwen3.5 uses NFC)", typ)
	}
	return true, nil
}

// preTokenizer accepts exactly Sequence[Split(Qwen pattern, Isolated),
// ByteLevel(no prefix space, no regex)]: the scanner in pretokenize.go is
// that split and nothing else.
func (p *jsonParser) preTokenizer(raw json.RawMessage) error {
	const field = "pre_tokenizer"
	const want = "a Sequence of Split (the Qwen regex, behavior Isolated) and ByteLevel (add_prefix_space false, use_regex false)"
	if isNull(raw) {
		return p.errorf(field, "is null; expected %s", want)
	}
	typ, obj, err := p.object(field, raw)
	if err != nil {
		return err
	}
	if typ != "Sequence" {
		return p.errorf(field+".type", "is %q; expected %s", typ, want)
	}
	var steps []json.RawMessage
	if err := json.Unmarshal(obj["pretokenizers"], &steps); err != nil {
		return p.errorf(field+".pretokenizers", "must be an array, found %.40s", obj["pretokenizers"])
	}
	if len(steps) != 2 {
		return p.errorf(field+".pretokenizers", "has %d steps; expected %s", len(steps), want)
	}
	if err := p.splitStep(field+".pretokenizers[0]", steps[0]); err != nil {
		return err
	}
	return p.byteLevelStep(field+".pretokenizers[1]", steps[1])
}

func (p *jsonParser) splitStep(field string, raw json.RawMessage) error {
	typ, obj, err := p.object(field, raw)
	if err != nil {
		return err
	}
	if typ != "Split" {
		return p.errorf(field+".type", "is %q; expected Split", typ)
	}
	var pattern map[string]string
	if err := json.Unmarshal(obj["pattern"], &pattern); err != nil || len(pattern) != 1 {
		return p.errorf(field+".pattern", `must be {"Regex": "..."}, found %.60s`, obj["pattern"])
	}
	regex, ok := pattern["Regex"]
	if !ok {
		return p.errorf(field+".pattern", `must be {"Regex": "..."}, found %.60s`, obj["pattern"])
	}
	if regex != qwenSplitPattern {
		return p.errorf(field+".pattern.Regex", "is %q; only the Qwen3.5 pattern %q is implemented", regex, qwenSplitPattern)
	}
	behavior, err := p.optionalString(field, obj, "behavior")
	if err != nil {
		return err
	}
	if behavior != "Isolated" {
		return p.errorf(field+".behavior", "is %q; only Isolated is supported", behavior)
	}
	return p.requireBool(field, obj, "invert", false, false)
}

func (p *jsonParser) byteLevelStep(field string, raw json.RawMessage) error {
	typ, obj, err := p.object(field, raw)
	if err != nil {
		return err
	}
	if typ != "ByteLevel" {
		return p.errorf(field+".type", "is %q; expected ByteLevel", typ)
	}
	if err := p.requireBool(field, obj, "add_prefix_space", true, false); err != nil {
		return err
	}
	return p.requireBool(field, obj, "use_regex", true, false)
}

// postProcessor accepts null or ByteLevel, which adds no tokens (it only
// adjusts offsets); anything that would add BOS/EOS around every encoding is
// refused because Encode never adds tokens.
func (p *jsonParser) postProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	typ, _, err := p.object("post_processor", raw)
	if err != nil {
		return err
	}
	if typ != "ByteLevel" {
		return p.errorf("post_processor.type", "is %q; only null or ByteLevel (which add no tokens) are supported", typ)
	}
	return nil
}

func (p *jsonParser) decoder(raw json.RawMessage) error {
	if isNull(raw) {
		return p.errorf("decoder", "is null; expected ByteLevel")
	}
	typ, _, err := p.object("decoder", raw)
	if err != nil {
		return err
	}
	if typ != "ByteLevel" {
		return p.errorf("decoder.type", "is %q; only ByteLevel is supported", typ)
	}
	return nil
}

// model checks the BPE model, fills m, and returns the vocabulary strings by
// id.
func (p *jsonParser) model(raw json.RawMessage, m *bpeModel) ([]string, error) {
	const field = "model"
	if isNull(raw) {
		return nil, p.errorf(field, "is missing; expected a BPE model")
	}
	typ, obj, err := p.object(field, raw)
	if err != nil {
		return nil, err
	}
	if typ != "BPE" {
		return nil, p.errorf(field+".type", "is %q; only BPE is supported", typ)
	}
	if err := p.bpeOptions(obj); err != nil {
		return nil, err
	}
	if m.ignoreMerges, err = p.optionalBool(field, obj, "ignore_merges", false); err != nil {
		return nil, err
	}
	vocab, err := p.vocab(obj["vocab"], m)
	if err != nil {
		return nil, err
	}
	for b := range 256 {
		id, ok := m.vocab[string(byteToSymbol[b])]
		if !ok {
			return nil, p.errorf(field+".vocab", "has no entry for the symbol %q of byte %#02x; a byte-level vocabulary needs all 256", byteToSymbol[b], b)
		}
		m.byteIDs[b] = id
	}
	if m.merges, err = p.merges(obj["merges"], m.vocab); err != nil {
		return nil, err
	}
	return vocab, nil
}

// bpeOptions refuses BPE settings that would change how pieces are merged.
func (p *jsonParser) bpeOptions(obj map[string]json.RawMessage) error {
	const field = "model"
	if raw, ok := obj["dropout"]; ok && !isNull(raw) {
		var d float64
		if err := json.Unmarshal(raw, &d); err != nil || d != 0 {
			return p.errorf(field+".dropout", "is %.20s; only null or 0 is supported (dropout is for training)", raw)
		}
	}
	for _, name := range []string{"continuing_subword_prefix", "end_of_word_suffix"} {
		s, err := p.optionalString(field, obj, name)
		if err != nil {
			return err
		}
		if s != "" {
			return p.errorf(field+"."+name, "is %q; only null is supported for byte-level BPE", s)
		}
	}
	return p.requireBool(field, obj, "byte_fallback", false, false)
}

// vocab reads model.vocab, which must give the ids 0…N−1 each exactly once,
// and returns the strings by id.
func (p *jsonParser) vocab(raw json.RawMessage, m *bpeModel) ([]string, error) {
	const field = "model.vocab"
	var entries map[string]int64
	if err := json.Unmarshal(raw, &entries); err != nil || entries == nil {
		if err == nil {
			return nil, p.errorf(field, "is missing or not an object")
		}
		return nil, p.syntaxError(field, err)
	}
	byID := make([]string, len(entries))
	seen := make([]bool, len(entries))
	m.vocab = make(map[string]int32, len(entries))
	for token, id := range entries {
		if id < 0 || id >= int64(len(entries)) {
			return nil, p.errorf(field+"["+strconv.Quote(token)+"]", "id %d is outside 0…%d; the ids of a vocabulary of %d entries must be 0…%d", id, len(entries)-1, len(entries), len(entries)-1)
		}
		if seen[id] {
			return nil, p.errorf(field+"["+strconv.Quote(token)+"]", "id %d is also the id of %q; vocabulary ids must be unique", id, byID[id])
		}
		seen[id] = true
		byID[id] = token
		m.vocab[token] = int32(id)
	}
	return byID, nil
}

// merges reads model.merges in either form, [["a","b"], …] or the older
// ["a b", …], and maps each pair of ids to its rank and result. As in the
// tokenizers library, a pair listed twice keeps its last rank, and legacy
// "#version" lines are skipped without taking a rank.
func (p *jsonParser) merges(raw json.RawMessage, vocab map[string]int32) (map[uint64]merge, error) {
	const field = "model.merges"
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || list == nil {
		if err == nil {
			return nil, p.errorf(field, "is missing or not an array")
		}
		return nil, p.syntaxError(field, err)
	}
	merges := make(map[uint64]merge, len(list))
	rank := int32(0)
	for i, item := range list {
		at := field + "[" + strconv.Itoa(i) + "]"
		left, right, skip, err := p.mergePair(at, item)
		if err != nil {
			return nil, err
		}
		if skip {
			continue
		}
		leftID, ok := vocab[left]
		if !ok {
			return nil, p.errorf(at, "left part %q is not in model.vocab", left)
		}
		rightID, ok := vocab[right]
		if !ok {
			return nil, p.errorf(at, "right part %q is not in model.vocab", right)
		}
		result, ok := vocab[left+right]
		if !ok {
			return nil, p.errorf(at, "merged token %q is not in model.vocab", left+right)
		}
		merges[pairKey(leftID, rightID)] = merge{rank: rank, result: result}
		rank++
	}
	return merges, nil
}

// mergePair decodes one merge; skip is set for a legacy "#version" line.
func (p *jsonParser) mergePair(at string, item json.RawMessage) (left, right string, skip bool, err error) {
	item = bytes.TrimSpace(item)
	if len(item) > 0 && item[0] == '"' {
		var line string
		if err := json.Unmarshal(item, &line); err != nil {
			return "", "", false, p.syntaxError(at, err)
		}
		if strings.HasPrefix(line, "#version") {
			return "", "", true, nil
		}
		parts := strings.Split(line, " ")
		if len(parts) != 2 {
			return "", "", false, p.errorf(at, "%q must be two tokens separated by one space", line)
		}
		return parts[0], parts[1], false, nil
	}
	var pair []string
	if err := json.Unmarshal(item, &pair); err != nil || len(pair) != 2 {
		return "", "", false, p.errorf(at, `must be ["left", "right"] or "left right", found %.60s`, item)
	}
	return pair[0], pair[1], false, nil
}

// addedTokenJSON is one entry of added_tokens. Pointers tell a missing field
// from a false one: the file must state every field.
type addedTokenJSON struct {
	ID         *int64  `json:"id"`
	Content    *string `json:"content"`
	Special    *bool   `json:"special"`
	Normalized *bool   `json:"normalized"`
	Lstrip     *bool   `json:"lstrip"`
	Rstrip     *bool   `json:"rstrip"`
	SingleWord *bool   `json:"single_word"`
}

// addedTokens reads added_tokens. Each id must be the one the tokenizers
// library gives the token on loading: its vocabulary id if the content is in
// model.vocab, otherwise the next id after the vocabulary, in list order.
// The library silently renumbers a file that disagrees; we refuse it, since
// the model was trained on the library's ids, not the file's.
func (p *jsonParser) addedTokens(raw json.RawMessage, vocab map[string]int32, vocabLen int) ([]addedToken, error) {
	if isNull(raw) {
		return nil, nil
	}
	var list []addedTokenJSON
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, p.syntaxError("added_tokens", err)
	}
	nextID := int64(vocabLen)
	contents := make(map[string]int, len(list))
	out := make([]addedToken, 0, len(list))
	for i, a := range list {
		at := "added_tokens[" + strconv.Itoa(i) + "]"
		tok, err := p.addedToken(at, a)
		if err != nil {
			return nil, err
		}
		if j, dup := contents[tok.content]; dup {
			return nil, p.errorf(at+".content", "%q is also added_tokens[%d]", tok.content, j)
		}
		contents[tok.content] = i
		want := nextID
		if id, inVocab := vocab[tok.content]; inVocab {
			want = int64(id)
		} else {
			nextID++
		}
		if *a.ID != want {
			return nil, p.errorf(at+".id", "is %d, but the tokenizers library gives %q id %d (its vocabulary id, or the next id after the vocabulary in list order); the file is inconsistent", *a.ID, tok.content, want)
		}
		tok.id = int32(want)
		out = append(out, tok)
	}
	return out, nil
}

func (p *jsonParser) addedToken(at string, a addedTokenJSON) (addedToken, error) {
	missing := func(name string) error {
		return p.errorf(at+"."+name, "is missing; every added token must state id, content, special, normalized, lstrip, rstrip and single_word")
	}
	switch {
	case a.ID == nil:
		return addedToken{}, missing("id")
	case a.Content == nil:
		return addedToken{}, missing("content")
	case a.Special == nil:
		return addedToken{}, missing("special")
	case a.Normalized == nil:
		return addedToken{}, missing("normalized")
	case a.Lstrip == nil:
		return addedToken{}, missing("lstrip")
	case a.Rstrip == nil:
		return addedToken{}, missing("rstrip")
	case a.SingleWord == nil:
		return addedToken{}, missing("single_word")
	}
	if *a.Content == "" {
		return addedToken{}, p.errorf(at+".content", "is empty")
	}
	return addedToken{
		content:    *a.Content,
		special:    *a.Special,
		normalized: *a.Normalized,
		lstrip:     *a.Lstrip,
		rstrip:     *a.Rstrip,
		singleWord: *a.SingleWord,
	}, nil
}

// buildAdded sets up the added-token matchers. Tokens with normalized=true
// are matched in their normalised form, on normalised text.
func (t *Tokenizer) buildAdded(added []addedToken) {
	t.addedIDs = make(map[string]int32, len(added))
	var raw, normalized []addedToken
	for _, a := range added {
		t.addedIDs[a.content] = a.id
		if !a.normalized {
			raw = append(raw, a)
			continue
		}
		if t.nfc {
			a.content = norm.NFC.String(a.content)
		}
		normalized = append(normalized, a)
	}
	t.rawAdded = newAddedMatcher(raw)
	t.normalizedAdded = newAddedMatcher(normalized)
}

// buildDecodeTable lays out the bytes of every id in one slice. Added tokens
// take precedence over a vocabulary entry with the same id, as in the
// tokenizers library.
func (t *Tokenizer) buildDecodeTable(vocab []string, added []addedToken) {
	text := slices.Clone(vocab)
	t.idCount = len(vocab)
	for _, a := range added {
		t.idCount = max(t.idCount, int(a.id)+1)
	}
	text = append(text, make([]string, t.idCount-len(text))...)
	t.special = make([]bool, t.idCount)
	for _, a := range added {
		text[a.id] = a.content
		t.special[a.id] = a.special
	}
	t.decodeOffsets = make([]uint32, t.idCount+1)
	for id, s := range text {
		t.decodeBytes = append(t.decodeBytes, symbolBytes(s)...)
		t.decodeOffsets[id+1] = uint32(len(t.decodeBytes))
		t.maxTokenBytes = max(t.maxTokenBytes, int(t.decodeOffsets[id+1]-t.decodeOffsets[id]))
	}
}

// tokenizerConfigJSON holds the fields of tokenizer_config.json nvmai reads.
type tokenizerConfigJSON struct {
	ChatTemplate       json.RawMessage            `json:"chat_template"`
	AddedTokensDecoder map[string]json.RawMessage `json:"added_tokens_decoder"`
	BOSToken           json.RawMessage            `json:"bos_token"`
	EOSToken           json.RawMessage            `json:"eos_token"`
	PadToken           json.RawMessage            `json:"pad_token"`
	UnkToken           json.RawMessage            `json:"unk_token"`
}

// config reads tokenizer_config.json: the chat template, and checks that the
// special tokens it names and its added_tokens_decoder agree with
// tokenizer.json (a mismatch means the two files are from different
// snapshots).
func (p *jsonParser) config(data []byte, t *Tokenizer) error {
	var cfg tokenizerConfigJSON
	if err := json.Unmarshal(data, &cfg); err != nil {
		return p.syntaxError("(top level)", err)
	}
	var err error
	if t.chatTemplate, err = p.chatTemplate(cfg.ChatTemplate); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"bos_token", cfg.BOSToken}, {"eos_token", cfg.EOSToken}, {"pad_token", cfg.PadToken}, {"unk_token", cfg.UnkToken}} {
		if err := p.knownToken(f.name, f.raw, t); err != nil {
			return err
		}
	}
	for key, raw := range cfg.AddedTokensDecoder {
		if err := p.addedTokenDecoderEntry(key, raw, t); err != nil {
			return err
		}
	}
	return nil
}

// chatTemplate accepts a string, or the list form [{"name", "template"}]
// from which the "default" template is taken.
func (p *jsonParser) chatTemplate(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", p.errorf("chat_template", "must be a string or a list of {name, template}, found %.40s", raw)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", nil
}

// tokenContent reads a special-token field: null, a string, or an
// AddedToken object with "content".
func (p *jsonParser) tokenContent(field string, raw json.RawMessage) (string, bool, error) {
	if isNull(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, p.errorf(field, "must be null, a string or an object with content, found %.40s", raw)
	}
	return *obj.Content, true, nil
}

func (p *jsonParser) knownToken(field string, raw json.RawMessage, t *Tokenizer) error {
	content, ok, err := p.tokenContent(field, raw)
	if err != nil || !ok {
		return err
	}
	if _, known := t.TokenID(content); !known {
		return p.errorf(field, "%q is not a token of tokenizer.json; the two files do not belong together", content)
	}
	return nil
}

func (p *jsonParser) addedTokenDecoderEntry(key string, raw json.RawMessage, t *Tokenizer) error {
	field := "added_tokens_decoder[" + strconv.Quote(key) + "]"
	id, err := strconv.Atoi(key)
	if err != nil || id < 0 {
		return p.errorf(field, "key must be a token id")
	}
	content, ok, err := p.tokenContent(field, raw)
	if err != nil {
		return err
	}
	if !ok {
		return p.errorf(field, "must name a token")
	}
	if got, known := t.addedIDs[content]; !known || int(got) != id {
		return p.errorf(field, "says id %d is %q, which tokenizer.json's added_tokens do not; the two files do not belong together", id, content)
	}
	return nil
}
