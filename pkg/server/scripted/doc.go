// Package scripted is a server.Engine for end-to-end tests of agent
// loops: it tokenizes with a real install's tokenizer and, instead of
// running a model, emits a fixed script per round — reasoning, then a tool
// call in Qwen3-Coder XML, and once the conversation holds the tool's
// result, an answer that quotes it — through the same tokenizer, so the
// server's parsers see what a model would produce. Real agent CLIs (Codex)
// then complete a tool loop without a model able to call tools.
//
// It is built only with -tags nvmai_scripted (nvmai-run serve --scripted
// FILE exists only in such a build); release binaries do not contain it.
// The script format is documented on Script and in docs/responses.md.
package scripted
