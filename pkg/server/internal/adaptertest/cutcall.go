package adaptertest

import "strings"

// CutCallTokens is one whole get_weather call, a token a piece, for the
// tests of replies that max_tokens cuts.
var CutCallTokens = []string{"<tool_call>", "\n<function=get_weather>\n", "<parameter=city>\nPar", "is\n</parameter>\n", "</function>\n</tool_call>"}

// WeatherParameters is the parameters schema of the get_weather tool
// CutCallTokens calls, and CutCallArguments the arguments of that call.
const (
	WeatherParameters = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`
	CutCallArguments  = `{"city":"Paris"}`
)

// CutCallCase is one reply of the cut-call tests: the engine's script, the
// request's token limit, the stop reason (or status) the protocol reports,
// and how many whole calls the reply holds.
type CutCallCase struct {
	Name      string
	Script    []string
	MaxTokens int
	Stop      string
	Calls     int
}

// CutCallCases are the replies of the cut-call tests in a protocol whose
// cut reply reports cut and whose finished call reports whole: a cut
// inside the only call, a whole call, a cut inside the second call after a
// whole first, and a cut in plain text.
func CutCallCases(cut, whole string) []CutCallCase {
	twoCalls := append(append([]string{}, CutCallTokens...), append([]string{"\n"}, CutCallTokens...)...)
	return []CutCallCase{
		{"cut inside the call", CutCallTokens, 3, cut, 0},
		{"whole call", CutCallTokens, 50, whole, 1},
		{"cut inside the second call", twoCalls, 8, cut, 1},
		{"cut in text", []string{"It", " is", " sunny"}, 2, cut, 0},
	}
}

// Streamed is the JSON request body with "stream":true added.
func Streamed(body string) string { return strings.Replace(body, "{", `{"stream":true,`, 1) }
