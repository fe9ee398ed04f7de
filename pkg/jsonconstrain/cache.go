package jsonconstrain

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/nvmai/nvmai/pkg/limits"
)

// CompileCached is CompileWithOptions through a cache of compiled schemas
// keyed by the SHA-256 of the options and the schema's bytes. Clients send
// the same schema with every request (an app's response format, an
// agent's tool list), and a schema with patterns or formats costs
// milliseconds to compile (its DFAs), which would otherwise be paid on
// every request. A refusal is cached too, so a client that retries a
// schema nvmai refuses costs a lookup. The cache keeps the
// limits.CompiledSchemas most recently used entries. A *Schema is
// immutable (each generation runs its own State), so one compiled schema
// serves any number of concurrent requests.
func CompileCached(schema json.RawMessage, opts Options) (*Schema, error) {
	return compiledSchemas.compile(schema, opts)
}

var compiledSchemas = newSchemaCache(limits.CompiledSchemas)

type schemaKey [sha256.Size]byte

type schemaEntry struct {
	key    schemaKey
	schema *Schema
	err    error
}

// schemaCache is a least-recently-used map from schemaKey to what
// CompileWithOptions returned.
type schemaCache struct {
	mu      sync.Mutex
	max     int
	byKey   map[schemaKey]*list.Element
	recency list.List // front: most recently used
	// compiles counts the compilations the cache could not spare (tests).
	compiles int
}

func newSchemaCache(max int) *schemaCache {
	return &schemaCache{max: max, byKey: map[schemaKey]*list.Element{}}
}

// cacheKey hashes every option (a schema compiled under other limits is
// another automaton) and then the schema's bytes as sent: a client sends
// the same bytes each time, and canonicalizing would cost a parse.
func cacheKey(schema json.RawMessage, o Options) schemaKey {
	h := sha256.New()
	var buf [8]byte
	for _, v := range []int{o.MaxDepth, o.MaxStringChars, o.MaxKeyBytes, o.MaxItems, o.MaxExtraProperties,
		o.MaxNumberBytes, o.MaxWhitespace, o.MaxSchemaBytes, o.MaxSchemaNodes, o.MaxEnumValues, o.MaxEnumBytes,
		o.MaxObjectProperties} {
		binary.LittleEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	h.Write(schema)
	var k schemaKey
	h.Sum(k[:0])
	return k
}

func (c *schemaCache) compile(schema json.RawMessage, o Options) (*Schema, error) {
	if len(schema) > o.clamped().MaxSchemaBytes {
		// Refused before any work; not worth an entry (nor hashing megabytes).
		return CompileWithOptions(schema, o)
	}
	k := cacheKey(schema, o)
	c.mu.Lock()
	if el, ok := c.byKey[k]; ok {
		c.recency.MoveToFront(el)
		e := el.Value.(*schemaEntry)
		c.mu.Unlock()
		return e.schema, e.err
	}
	c.compiles++
	c.mu.Unlock()
	// Compiled outside the lock: two requests with the same new schema may
	// both compile it; the first to finish is kept.
	s, err := CompileWithOptions(schema, o)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		c.recency.MoveToFront(el)
		e := el.Value.(*schemaEntry)
		return e.schema, e.err
	}
	c.byKey[k] = c.recency.PushFront(&schemaEntry{key: k, schema: s, err: err})
	for c.recency.Len() > c.max {
		old := c.recency.Back()
		c.recency.Remove(old)
		delete(c.byKey, old.Value.(*schemaEntry).key)
	}
	return s, err
}

// len is the number of entries held.
func (c *schemaCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.recency.Len()
}
