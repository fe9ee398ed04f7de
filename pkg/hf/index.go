package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"unicode/utf8"

	"github.com/nvmai/nvmai/internal/jsonwalk"
)

// Index is a parsed model.safetensors.index.json.
type Index struct {
	WeightMap map[string]string // tensor name → shard file, relative to the snapshot
	Shards    []string          // distinct shard files, sorted
}

// ParseIndex parses index content (name is used in errors). Every shard name
// must be a plain relative path inside the snapshot, and a tensor named twice
// is refused rather than silently resolved to its last shard.
func ParseIndex(data []byte, name string) (*Index, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%s: not valid UTF-8", name)
	}
	weightMap, ok := parseWeightMapFast(data)
	if !ok {
		var err error
		if weightMap, err = parseWeightMapStrict(data); err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
	}
	if len(weightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map is missing or empty", name)
	}
	idx := &Index{WeightMap: weightMap}
	seen := map[string]bool{}
	for tensor, shard := range weightMap {
		if err := checkRelativeName(shard); err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %v", name, tensor, err)
		}
		if !seen[shard] {
			seen[shard] = true
			idx.Shards = append(idx.Shards, shard)
		}
	}
	sort.Strings(idx.Shards)
	return idx, nil
}

// parseWeightMapFast decodes a well-formed index with encoding/json's fast
// path (a 28 MB index in a fraction of a second) and reports false when the
// document is malformed or repeats a key, which json.Unmarshal would silently
// merge; the strict parser then finds and names the problem.
func parseWeightMapFast(data []byte) (map[string]string, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil || countKeys(data) != len(top) {
		return nil, false
	}
	raw, ok := top["weight_map"]
	if !ok {
		return nil, true
	}
	var m map[string]string
	if json.Unmarshal(raw, &m) != nil || countKeys(raw) != len(m) {
		return nil, false
	}
	return m, true
}

// countKeys counts the keys of the top-level object of data, which must be
// valid JSON: a string directly inside that object that follows '{' or ','
// is a key.
func countKeys(data []byte) int {
	depth, n := 0, 0
	var prev byte
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			if depth == 1 && (prev == '{' || prev == ',') {
				n++
			}
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			prev = '"'
		case '{', '[':
			depth++
			prev = c
		case '}', ']':
			depth--
			prev = c
		case ' ', '\t', '\n', '\r':
		default:
			prev = c
		}
	}
	return n
}

// parseWeightMapStrict walks the document token by token so that it can name
// the repeated key or the malformed entry.
func parseWeightMapStrict(data []byte) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var weightMap map[string]string
	err := jsonwalk.Object(dec, func(key string) error {
		if key != "weight_map" {
			var skip json.RawMessage // "metadata" and anything else carry nothing we need
			return dec.Decode(&skip)
		}
		var err error
		weightMap, err = decodeWeightMap(dec)
		return err
	})
	if err == nil {
		if _, err2 := dec.Token(); err2 != io.EOF {
			err = fmt.Errorf("unexpected data after the JSON object")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%v (near byte %d)", err, dec.InputOffset())
	}
	return weightMap, nil
}

func decodeWeightMap(dec *json.Decoder) (map[string]string, error) {
	m := map[string]string{}
	err := jsonwalk.Object(dec, func(tensor string) error {
		var shard string
		if err := dec.Decode(&shard); err != nil {
			return fmt.Errorf("weight_map[%q]: want a file name: %v", tensor, jsonwalk.NoEOF(err))
		}
		m[tensor] = shard
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("weight_map: %w", err)
	}
	return m, nil
}
