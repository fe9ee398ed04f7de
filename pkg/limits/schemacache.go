package limits

// CompiledSchemas bounds how many compiled schemas pkg/jsonconstrain keeps
// for reuse (its CompileCached, which the server's protocol adapters call
// for every response_format, output_format and text.format). Clients send
// the same few schemas with every request (an app's response format, an
// agent's tools), so a handful of entries serves them; the bound is on
// memory, since a schema with patterns or formats compiles to DFAs of up
// to PatternStates states (a few MB): 32 such schemas stay near 100 MB in
// the worst case, and typical schemas compile to a few KB.
const CompiledSchemas = 32
