package jsonconstrain

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/limits"
)

// The cache returns the schema it compiled for the same bytes and
// options, compiles again for other options, keeps refusals, and holds
// at most its bound, dropping the least recently used.
func TestSchemaCache(t *testing.T) {
	c := newSchemaCache(3)
	person := json.RawMessage(personSchema)
	a, err := c.compile(person, DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := c.compile(person, DefaultOptions); b != a || c.compiles != 1 {
		t.Fatalf("same schema: %p then %p, %d compilations", a, b, c.compiles)
	}
	if b, _ := c.compile(person, smallOptions); b == a || c.compiles != 2 {
		t.Fatalf("other options shared an entry (%d compilations)", c.compiles)
	}
	bad := json.RawMessage(`{"type":"string","not":{}}`)
	_, err1 := c.compile(bad, DefaultOptions)
	_, err2 := c.compile(bad, DefaultOptions)
	var se *SchemaError
	if !errors.As(err1, &se) || err2 != err1 || c.compiles != 3 {
		t.Fatalf("refusal: %v then %v, %d compilations", err1, err2, c.compiles)
	}
	// person (default options) is used again, so the next new schema
	// evicts the least recently used: person under smallOptions.
	c.compile(person, DefaultOptions)
	c.compile(json.RawMessage(`{"type":"integer"}`), DefaultOptions)
	if n := c.len(); n != 3 {
		t.Fatalf("%d entries, bound 3", n)
	}
	before := c.compiles
	if b, _ := c.compile(person, DefaultOptions); b != a || c.compiles != before {
		t.Fatal("the recently used entry was evicted")
	}
	c.compile(person, smallOptions)
	if c.compiles != before+1 {
		t.Fatal("the least recently used entry was kept past the bound")
	}
}

// Compiled schemas are shared by concurrent requests (run with -race):
// each generation has its own State.
func TestCompileCachedConcurrent(t *testing.T) {
	if limits.CompiledSchemas < 1 {
		t.Fatal("limits.CompiledSchemas must allow an entry")
	}
	m, _ := fixtureMasker(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			schema := json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"n":{"type":"integer","maximum":%d}},"required":["n"],"additionalProperties":false}`, g%2))
			s, err := CompileCached(schema, DefaultOptions)
			if err != nil {
				t.Error(err)
				return
			}
			c := m.Constrain(s)
			logits := make([]float32, fixtureTokenizer(t).IDCount())
			for _, b := range []byte(`{"n":0}`) {
				if !c.st.AcceptBytes([]byte{b}) {
					t.Errorf("byte %q refused", b)
					return
				}
			}
			if c.Mask(logits) == 0 {
				t.Error("dead end")
			}
		}()
	}
	wg.Wait()
}

// A schema over the size limit is refused without an entry.
func TestCompileCachedOversized(t *testing.T) {
	c := newSchemaCache(2)
	o := DefaultOptions
	o.MaxSchemaBytes = 16
	if _, err := c.compile(json.RawMessage(personSchema), o); err == nil || c.len() != 0 {
		t.Fatalf("err %v, %d entries", err, c.len())
	}
}
