package server

import "strings"

// stopMatcher finds client stop strings in streamed text. Text that could
// be the start of a stop string is held back until it cannot, so a stop
// string is never emitted, not even in part. Held-back text always starts
// at a character boundary: it equals a prefix of a (valid UTF-8) stop
// string, which starts with a leading byte.
type stopMatcher struct {
	stops []string
	buf   string
	hit   bool
	match string // the stop string that ended generation
}

func newStopMatcher(stops []string) *stopMatcher {
	var s []string
	for _, x := range stops {
		if x != "" {
			s = append(s, x)
		}
	}
	return &stopMatcher{stops: s}
}

// Push adds text and returns what is now safe to emit, and whether a stop
// string was found (generation should end; nothing after it is emitted).
func (m *stopMatcher) Push(text string) (string, bool) {
	if m.hit {
		return "", true
	}
	if len(m.stops) == 0 {
		return text, false
	}
	m.buf += text
	first, match := -1, ""
	for _, s := range m.stops {
		if i := strings.Index(m.buf, s); i >= 0 && (first < 0 || i < first) {
			first, match = i, s
		}
	}
	if first >= 0 {
		out := m.buf[:first]
		m.buf, m.hit, m.match = "", true, match
		return out, true
	}
	keep := m.heldBack()
	out := m.buf[:len(m.buf)-keep]
	m.buf = m.buf[len(m.buf)-keep:]
	return out, false
}

// heldBack is the length of the longest suffix of buf that is a proper
// prefix of a stop string.
func (m *stopMatcher) heldBack() int {
	best := 0
	for _, s := range m.stops {
		for n := min(len(s)-1, len(m.buf)); n > best; n-- {
			if strings.HasSuffix(m.buf, s[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

// Matched is the stop string that was found ("" while none was): the
// earliest in the text, the first listed of those starting there.
func (m *stopMatcher) Matched() string { return m.match }

// Flush returns the held-back text at the end of generation.
func (m *stopMatcher) Flush() string {
	out := m.buf
	m.buf = ""
	return out
}
