package server

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
)

// FormatLimitsField is the request field, on all three protocols, that
// tightens how long a structured-output document may run where its schema
// leaves a length open.
const FormatLimitsField = "nvmai_format_limits"

// FormatLimits is the request field nvmai_format_limits. Each bound applies
// where the schema sets none (a string without maxLength, an array without
// maxItems, keys additionalProperties allows) and may only lower nvmai's
// default (jsonconstrain.DefaultOptions), so a document that fits the
// limits always fits the schema. A schema that needs more than a limit
// allows (a minLength, a format's length) is refused by name.
type FormatLimits struct {
	MaxStringChars     *int `json:"max_string_chars"`     // characters of a string value (default 4,096)
	MaxKeyBytes        *int `json:"max_key_bytes"`        // bytes of a key properties does not name (256)
	MaxItems           *int `json:"max_items"`            // elements of an array (1,024)
	MaxExtraProperties *int `json:"max_extra_properties"` // keys per object properties does not name (256)
	MaxDepth           *int `json:"max_depth"`            // nesting of objects and arrays (32)
	MaxWhitespace      *int `json:"max_whitespace"`       // whitespace bytes in a row between tokens (4)
}

// FormatOptions returns the compile options for a request whose
// nvmai_format_limits is raw (DefaultOptions when it is absent or null).
// An unknown key, a negative value or one above the default is an error
// naming the field.
func FormatOptions(raw json.RawMessage) (jsonconstrain.Options, error) {
	opts := jsonconstrain.DefaultOptions
	if len(raw) == 0 || string(raw) == "null" {
		return opts, nil
	}
	var l FormatLimits
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return opts, fmt.Errorf("%s must be an object of max_string_chars, max_key_bytes, max_items, max_extra_properties, max_depth, max_whitespace (integers): %v", FormatLimitsField, err)
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
		min  int
	}{
		{"max_string_chars", l.MaxStringChars, &opts.MaxStringChars, 0},
		{"max_key_bytes", l.MaxKeyBytes, &opts.MaxKeyBytes, 0},
		{"max_items", l.MaxItems, &opts.MaxItems, 0},
		{"max_extra_properties", l.MaxExtraProperties, &opts.MaxExtraProperties, 0},
		{"max_depth", l.MaxDepth, &opts.MaxDepth, 1},
		{"max_whitespace", l.MaxWhitespace, &opts.MaxWhitespace, 0},
	} {
		if f.v == nil {
			continue
		}
		if *f.v < f.min || *f.v > *f.dst {
			return opts, fmt.Errorf("%s.%s %d: must be from %d to %d (nvmai's default; the limits only tighten)", FormatLimitsField, f.name, *f.v, f.min, *f.dst)
		}
		*f.dst = *f.v
	}
	return opts, nil
}
