package jsonconstrain

import (
	"fmt"
	"sort"
	"strings"
)

// "format" is enforced by compiling each supported format to internal
// patterns (anchored at both ends), which then go through the same DFA as
// "pattern". Each pattern is the format's grammar from its RFC, as exact as
// a finite automaton reading left to right can be; docs/structured-output.md
// lists, per format, what it leaves out.

// formatSpec is one format: the patterns a string must match, and a cap on
// its length (0: none) where the RFC bounds the whole string.
type formatSpec struct {
	patterns []string
	maxLen   int
}

const (
	rxDecOctet = `(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)`
	rxIPv4     = rxDecOctet + `\.` + rxDecOctet + `\.` + rxDecOctet + `\.` + rxDecOctet
	rxH16      = `[0-9A-Fa-f]{1,4}`
	rxLS32     = `(?:` + rxH16 + `:` + rxH16 + `|` + rxIPv4 + `)`
	// RFC 3986 section 3.2.2's IPv6address: each place "::" may stand.
	rxIPv6 = `(?:(?:` + rxH16 + `:){6}` + rxLS32 +
		`|::(?:` + rxH16 + `:){5}` + rxLS32 +
		`|(?:` + rxH16 + `)?::(?:` + rxH16 + `:){4}` + rxLS32 +
		`|(?:(?:` + rxH16 + `:){0,1}` + rxH16 + `)?::(?:` + rxH16 + `:){3}` + rxLS32 +
		`|(?:(?:` + rxH16 + `:){0,2}` + rxH16 + `)?::(?:` + rxH16 + `:){2}` + rxLS32 +
		`|(?:(?:` + rxH16 + `:){0,3}` + rxH16 + `)?::` + rxH16 + `:` + rxLS32 +
		`|(?:(?:` + rxH16 + `:){0,4}` + rxH16 + `)?::` + rxLS32 +
		`|(?:(?:` + rxH16 + `:){0,5}` + rxH16 + `)?::` + rxH16 +
		`|(?:(?:` + rxH16 + `:){0,6}` + rxH16 + `)?::)`

	// RFC 1123 section 2.1 labels: letters, digits and hyphens, 1 to 63
	// characters, no hyphen first or last.
	rxLabel    = `[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?`
	rxHostname = rxLabel + `(?:\.` + rxLabel + `)*`

	// RFC 3339 section 5.6, with the days of each month (February 29 only
	// in leap years: divisible by 4, and centuries only by 400).
	rxLeapYear = `(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)`
	rxDate     = `(?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))|` + rxLeapYear + `-02-29)`
	rxTime     = `(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)`

	// RFC 3339 appendix A.
	rxDurTime  = `T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)`
	rxDuration = `P(?:\d+W|(?:\d+D|\d+M(?:\d+D)?|\d+Y(?:\d+M(?:\d+D)?)?)(?:` + rxDurTime + `)?|` + rxDurTime + `)`

	// RFC 9562 (formerly 4122) section 4: hex digits of either case.
	rxUUID = `[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}`

	// RFC 5321 section 4.1.2 Mailbox, with a dot-atom local part (RFC 5322
	// atext) and a host name or an IPv4 or IPv6 address literal.
	rxAtext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
	rxEmail = rxAtext + `+(?:\.` + rxAtext + `+)*@(?:` + rxHostname + `|\[` + rxIPv4 + `\]|\[IPv6:` + rxIPv6 + `\])`

	// RFC 3986 section 3: an absolute URI. Hosts are registered names,
	// IPv4 or IPv6 literals, without percent-encoding.
	rxUnreserved = `A-Za-z0-9\-._~`
	rxSubDelims  = `!$&'()*+,;=`
	rxPct        = `%[0-9A-Fa-f]{2}`
	rxPchar      = `(?:[` + rxUnreserved + rxSubDelims + `:@]|` + rxPct + `)`
	rxAuthority  = `(?:(?:[` + rxUnreserved + rxSubDelims + `:]|` + rxPct + `)*@)?(?:\[` + rxIPv6 + `\]|[` + rxUnreserved + rxSubDelims + `]*)(?::\d*)?`
	rxSegments   = `(?:/` + rxPchar + `*)*`
	rxURI        = `[A-Za-z][A-Za-z0-9+.\-]*:(?://` + rxAuthority + rxSegments + `|/(?:` + rxPchar + `+` + rxSegments + `)?|` + rxPchar + `+` + rxSegments + `)?` +
		`(?:\?(?:` + rxPchar + `|[/?])*)?(?:#(?:` + rxPchar + `|[/?])*)?`
)

var formats = map[string]formatSpec{
	"date-time": {patterns: []string{"^" + rxDate + "[Tt]" + rxTime + "$"}},
	"date":      {patterns: []string{"^" + rxDate + "$"}},
	"time":      {patterns: []string{"^" + rxTime + "$"}},
	"duration":  {patterns: []string{"^" + rxDuration + "$"}},
	"uuid":      {patterns: []string{"^" + rxUUID + "$"}},
	"ipv4":      {patterns: []string{"^" + rxIPv4 + "$"}},
	"ipv6":      {patterns: []string{"^" + rxIPv6 + "$"}},
	// RFC 1035 section 2.3.4: at most 253 characters written out.
	"hostname": {patterns: []string{"^" + rxHostname + "$"}, maxLen: 253},
	// RFC 5321 section 4.5.3.1: a local part of at most 64 octets, a path
	// of 256 (so an address of 254, without its angle brackets).
	"email": {patterns: []string{"^" + rxEmail + "$", "^[^@]{1,64}@"}, maxLen: 254},
	"uri":   {patterns: []string{"^" + rxURI + "$"}},
}

// formatNames lists the supported formats for error messages.
func formatNames() string {
	names := make([]string, 0, len(formats))
	for name := range formats {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// formatSources are the patterns of a named format; ok is false for a
// format nvmai does not enforce.
func formatSources(name string) ([]patternSource, bool) {
	spec, ok := formats[name]
	if !ok {
		return nil, false
	}
	var out []patternSource
	for _, p := range spec.patterns {
		out = append(out, patternSource{regex: p, keyword: "format", label: fmt.Sprintf("format %q", name), maxLen: spec.maxLen})
	}
	return out, true
}
