package packexperts

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"unicode/utf8"

	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// Tokenizer files a snapshot ships and an install carries verbatim.
const (
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
	ChatTemplateFile    = "chat_template.jinja" // optional; wins over tokenizer_config.json's chat_template
)

// CheckTokenizerFiles parses dir's tokenizer.json and tokenizer_config.json
// as the runtime will (so a broken one is found when a snapshot is
// converted or an install verified, not when a user first runs it) and
// checks chat_template.jinja when there is one. The error names the file.
// Whether the template's Jinja compiles is pkg/chattemplate's to say.
func CheckTokenizerFiles(dir string) error {
	if _, err := tokenizer.Load(filepath.Join(dir, TokenizerFile), filepath.Join(dir, TokenizerConfigFile)); err != nil {
		file := TokenizerFile
		var fe *tokenizer.FormatError
		if errors.As(err, &fe) {
			file = filepath.Base(fe.File)
		}
		return &MetadataError{File: file, Err: err}
	}
	if err := CheckChatTemplateFile(filepath.Join(dir, ChatTemplateFile)); err != nil {
		return &MetadataError{File: ChatTemplateFile, Err: err}
	}
	return nil
}

// MetadataError is a broken metadata file; File is its name in the
// directory, Err says what is wrong (and names the path).
type MetadataError struct {
	File string
	Err  error
}

func (e *MetadataError) Error() string { return e.Err.Error() }
func (e *MetadataError) Unwrap() error { return e.Err }

// CheckChatTemplateFile checks a chat_template.jinja: within the size
// ceiling, not empty, UTF-8 text without NUL bytes. A missing file is fine.
func CheckChatTemplateFile(path string) error {
	src, err := limits.ReadFile(path, limits.SnapshotJSON)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return CheckChatTemplate(path, src)
}

// CheckChatTemplate checks a template's source; name is used in errors.
func CheckChatTemplate(name string, src []byte) error {
	switch {
	case len(bytes.TrimSpace(src)) == 0:
		return fmt.Errorf("%s: the chat template is empty", name)
	case !utf8.Valid(src):
		return fmt.Errorf("%s: not UTF-8 text (invalid byte sequence at byte %d)", name, firstInvalidUTF8(src))
	case bytes.IndexByte(src, 0) >= 0:
		return fmt.Errorf("%s: holds a NUL byte at byte %d; a template is text", name, bytes.IndexByte(src, 0))
	}
	return nil
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}
