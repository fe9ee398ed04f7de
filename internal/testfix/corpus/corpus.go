// Package corpus reads pkg/jsonconstrain/testdata/corpus, the JSON schemas
// real clients send (SDK examples, npm MCP servers; its SOURCES.md says
// where each came from), and holds the independent validator that judges
// documents generated under them, so that the constraint packages and the
// server test against the same corpus the same way. It is for tests only.
package corpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/nvmai/nvmai/internal/testfix"
)

// Dir is the corpus directory, found from the repository root.
func Dir(t testing.TB) string {
	t.Helper()
	return filepath.Join(testfix.RepoRoot(t), "pkg", "jsonconstrain", "testdata", "corpus")
}

// File is one file of the corpus: its base name and either a "schema" or
// "tools".
type File struct {
	Name   string
	Schema json.RawMessage
	Tools  []Tool
}

// Tool is one tool of a corpus file's "tools".
type Tool struct {
	Name         string          `json:"name"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
}

// Files reads every file of the corpus, in name order, failing the test
// on one that is not {"_source": {...}, "schema": {...}} or {"_source":
// {...}, "tools": [{"name", "inputSchema", "outputSchema"?}]}.
func Files(t testing.TB) []File {
	t.Helper()
	dir := Dir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus under %s: %v", dir, err)
	}
	var out []File
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Source json.RawMessage `json:"_source"`
			Schema json.RawMessage `json:"schema"`
			Tools  []Tool          `json:"tools"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(doc.Source) == 0 || (doc.Schema == nil) == (doc.Tools == nil) {
			t.Fatalf("%s: want _source and one of schema or tools", f)
		}
		for _, tool := range doc.Tools {
			if tool.Name == "" || tool.InputSchema == nil {
				t.Fatalf("%s: a tool without name or inputSchema", f)
			}
		}
		out = append(out, File{filepath.Base(f), doc.Schema, doc.Tools})
	}
	return out
}

// Schema is one schema of the corpus: a file's "schema", or one tool's
// inputSchema or outputSchema from a file's "tools".
type Schema struct {
	Name   string // file stem, then #tool and /output for a tool's schemas
	Schema json.RawMessage
}

// Schemas is every schema of the corpus, in name order, named as in
// pkg/jsonconstrain's corpus.golden.
func Schemas(t testing.TB) []Schema {
	t.Helper()
	var out []Schema
	for _, f := range Files(t) {
		stem := strings.TrimSuffix(f.Name, ".json")
		if f.Schema != nil {
			out = append(out, Schema{stem, f.Schema})
		}
		for _, tool := range f.Tools {
			out = append(out, Schema{stem + "#" + tool.Name, tool.InputSchema})
			if tool.OutputSchema != nil {
				out = append(out, Schema{stem + "#" + tool.Name + "/output", tool.OutputSchema})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Validator is the independent judge of the corpus tests: the schema
// compiled by santhosh-tekuri/jsonschema with format assertion on (so a
// "format": "date" is checked, not just annotated), in the draft its
// $schema names, else 2020-12, else draft 4.
type Validator struct{ sch *jsonschema.Schema }

// NewValidator compiles schema for the judge.
func NewValidator(schema json.RawMessage) (*Validator, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	var firstErr error
	for _, draft := range []*jsonschema.Draft{jsonschema.Draft2020, jsonschema.Draft4} {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(draft)
		c.AssertFormat()
		if err := c.AddResource("corpus.json", doc); err != nil {
			return nil, err
		}
		sch, err := c.Compile("corpus.json")
		if err == nil {
			return &Validator{sch}, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

// Check fails unless doc is one valid UTF-8 JSON value the schema accepts.
func (v *Validator) Check(doc []byte) error {
	if !utf8.Valid(doc) {
		return fmt.Errorf("not valid UTF-8")
	}
	val, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("does not parse: %v", err)
	}
	return v.sch.Validate(val)
}
