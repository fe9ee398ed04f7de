package jsonconstrain

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// FuzzCompile compiles arbitrary schemas: no panic, and when one compiles,
// any document the automaton completes from arbitrary bytes parses and
// validates.
//
//	go test -run '^$' -fuzz FuzzCompile ./pkg/jsonconstrain/
func FuzzCompile(f *testing.F) {
	for _, s := range walkSchemas {
		f.Add([]byte(s), []byte(`{"name":"ab","age":1}`))
	}
	f.Add([]byte(`{"anyOf":[{"type":"string"},{"enum":[1,[2]]}]}`), []byte(`[2]`))
	f.Add([]byte(`{"items":{"const":"x"},"maxItems":2}`), []byte(`["x","x"]`))
	f.Add([]byte(`{"type":"integer","minimum":-20,"maximum":300}`), []byte(`-19`))
	f.Add([]byte(`{"type":"number","exclusiveMinimum":0.5,"maximum":2}`), []byte(`0.51`))
	f.Add([]byte(`{"properties":{"a":{"$ref":"#"}},"enum":[{"a":{}}]}`), []byte(`{"a":{}}`))
	f.Add([]byte(`{"type":"object","properties":{"a":{"pattern":"x"}}}`), []byte(`{}`))
	f.Add([]byte(`{"type":"string","pattern":"^(a|bc){1,3}$","minLength":2}`), []byte(`"abc"`))
	f.Add([]byte(`{"type":"string","format":"date-time"}`), []byte(`"2024-02-29T00:00:00Z"`))
	f.Add([]byte(`{"oneOf":[{"type":"object","properties":{"t":{"const":"a"}},"required":["t"]},{"type":"object","properties":{"t":{"const":"b"},"n":{"$ref":"#"}},"required":["t"]},{"type":"null"}]}`), []byte(`{"t":"b","n":{"t":"a"}}`))
	f.Add([]byte(`{"type":"number","multipleOf":0.25,"maximum":3}`), []byte(`2.75`))
	f.Fuzz(func(t *testing.T, schema, doc []byte) {
		if len(schema) == 0 {
			return
		}
		s, err := Compile(json.RawMessage(schema))
		if err != nil {
			if _, ok := err.(*SchemaError); !ok {
				t.Fatalf("error %T is not a *SchemaError", err)
			}
			return
		}
		if !json.Valid(schema) {
			t.Fatalf("invalid JSON %q compiled", schema)
		}
		feed(t, s, string(schema), doc)
	})
}

// FuzzAutomaton feeds arbitrary bytes to fixed schemas.
//
//	go test -run '^$' -fuzz FuzzAutomaton ./pkg/jsonconstrain/
func FuzzAutomaton(f *testing.F) {
	f.Add(uint8(0), []byte(`{"a":[1,{"b":"c"}]}`))
	f.Add(uint8(1), []byte(`{"name":"ab","age":1,"tags":["a",12]}`))
	f.Add(uint8(2), []byte(`["abc",1.5e3,null]`))
	f.Add(uint8(3), []byte(`{"a":{"b":true},"z":"é😀"}`))
	f.Fuzz(func(t *testing.T, which uint8, doc []byte) {
		schema := walkSchemas[int(which)%len(walkSchemas)]
		feed(t, mustCompile(t, schema), schema, doc)
	})
}

// feed accepts doc's bytes while it can, checking that a refused byte
// leaves the state as it was and that a complete document validates.
func feed(t *testing.T, s *Schema, schema string, doc []byte) {
	st := s.Start()
	n := 0
	for ; n < len(doc); n++ {
		before := st.Done()
		if !st.Accept(doc[n]) {
			if st.Done() != before {
				t.Fatalf("a refused byte changed the state")
			}
			break
		}
	}
	if st.Done() {
		checkDocument(t, schema, doc[:n])
	}
}

// FuzzResponseFormat: any request field gives a schema, nil or a
// *ResponseFormatError, never a panic.
func FuzzResponseFormat(f *testing.F) {
	f.Add([]byte(`{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}`))
	f.Add([]byte(`{"type":"json_object"}`))
	f.Fuzz(func(t *testing.T, rf []byte) {
		if _, err := FromResponseFormat(rf, DefaultOptions); err != nil {
			if _, ok := err.(*ResponseFormatError); !ok {
				t.Fatalf("error %T", err)
			}
		}
	})
}

// FuzzWalk compiles arbitrary schemas under small options and samples a
// random token walk through the fixture vocabulary: no state may leave
// nothing allowed, and a finished walk must validate.
//
//	go test -run '^$' -fuzz FuzzWalk ./pkg/jsonconstrain/
func FuzzWalk(f *testing.F) {
	for i, s := range walkSchemas {
		f.Add([]byte(s), uint64(i))
	}
	f.Add([]byte(`{"anyOf":[{"type":"object","required":["a"]},{"enum":[[1],"x"]}]}`), uint64(9))
	f.Add([]byte(`{"type":"object","properties":{"n":{"type":"integer","minimum":-5,"exclusiveMaximum":12}},"required":["n"]}`), uint64(10))
	f.Add([]byte(`{"type":"number","minimum":0,"maximum":1}`), uint64(11))
	f.Add([]byte(`{"prefixItems":[{"type":"string"},{"$ref":"#"}],"items":false}`), uint64(13))
	f.Add([]byte(`{"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"a":{"maximum":3}}}]}`), uint64(14))
	f.Add([]byte(`{"$defs":{"T":{"type":"array","items":{"$ref":"#/$defs/T"}}},"$ref":"#/$defs/T"}`), uint64(12))
	f.Fuzz(func(t *testing.T, schema []byte, seed uint64) {
		if len(schema) == 0 || len(schema) > 512 {
			return
		}
		s, err := CompileWithOptions(schema, smallOptions)
		if err != nil {
			return
		}
		m, ends := fixtureMasker(t)
		rng := rand.New(rand.NewPCG(seed, 0))
		doc, ok := walkSteps(t, m, fixtureTokenizer(t), s, rng, map[int]bool{ends[0]: true, ends[1]: true}, false, 400)
		if ok {
			checkDocument(t, string(schema), doc)
		}
	})
}
