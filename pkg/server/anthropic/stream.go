package anthropic

// pingEvent keeps Anthropic's stream alive whenever it has been silent for
// a while (queue waits, long prefills): Claude Code gives up on a silent
// stream and sends the whole turn again. The stream itself is package
// sse's (a client that stops reading is cut off).
const pingEvent = "event: ping\ndata: {\"type\":\"ping\"}\n\n"
