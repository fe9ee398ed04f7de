package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ardanlabs/jinja"

	"github.com/nvmai/nvmai/pkg/limits"
)

// tokenizerConfig is what rendering needs of tokenizer_config.json.
type tokenizerConfig struct {
	ChatTemplate json.RawMessage            `json:"chat_template"`
	Tokens       map[string]json.RawMessage `json:"-"`
}

// specialTokenNames are transformers' SPECIAL_TOKENS_ATTRIBUTES: the
// tokenizer's special_tokens_map, which apply_chat_template passes to every
// template, holds those of them that are set.
var specialTokenNames = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "additional_special_tokens"}

// readTokenizerConfig reads dir's tokenizer_config.json; nil when absent.
func readTokenizerConfig(dir string) (*tokenizerConfig, error) {
	path := filepath.Join(dir, tokenizerConfigFile)
	data, err := limits.ReadFile(path, limits.SnapshotJSON)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfg := &tokenizerConfig{ChatTemplate: all["chat_template"], Tokens: map[string]json.RawMessage{}}
	if string(cfg.ChatTemplate) == "null" {
		cfg.ChatTemplate = nil
	}
	for _, name := range specialTokenNames {
		if v, ok := all[name]; ok {
			cfg.Tokens[name] = v
		}
	}
	return cfg, nil
}

// template is the chat_template value: a string, or a list of named
// templates of which transformers renders "default" when no name is asked.
func (c *tokenizerConfig) template() (string, error) {
	var s string
	if err := json.Unmarshal(c.ChatTemplate, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(c.ChatTemplate, &named); err != nil {
		return "", errors.New("is neither a string nor a list of {name, template}")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New(`lists named templates but none is named "default"`)
}

// specialTokens maps each set special token to its text. A token is either
// a string or an AddedToken object ({"content": …}); null means unset.
func (c *tokenizerConfig) specialTokens() map[string]jinja.Value {
	out := map[string]jinja.Value{}
	for name, raw := range c.Tokens {
		if name == "additional_special_tokens" {
			var list []json.RawMessage
			if json.Unmarshal(raw, &list) != nil {
				continue
			}
			items := make([]jinja.Value, 0, len(list))
			for _, item := range list {
				if s, ok := tokenText(item); ok {
					items = append(items, jinja.NewString(s))
				}
			}
			out[name] = jinja.NewList(items)
			continue
		}
		if s, ok := tokenText(raw); ok {
			out[name] = jinja.NewString(s)
		}
	}
	return out
}

func tokenText(raw json.RawMessage) (string, bool) {
	if string(raw) == "null" {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var added struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &added) == nil && added.Content != nil {
		return *added.Content, true
	}
	return "", false
}
