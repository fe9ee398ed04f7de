package limits

// Limits on what a JSON schema may make the constrained-output compiler
// (pkg/jsonconstrain) build. The server's response_format and its tool-call
// constraints compile schemas through the same compiler, so both refuse
// the same schemas.
const (
	// PatternChars bounds the characters a "pattern" (or a "format")
	// expands to once its counted repetitions are written out:
	// "[a-z]{1,64}" is 64. RFC 5321's longest address part, a 254-byte
	// e-mail address, and RFC 1035's 253-byte host name fit many times over.
	PatternChars = 4096

	// PatternStates bounds the states of the DFA one string schema
	// compiles to (its patterns and formats together, with minLength
	// counted in). Each state costs a row of byte-class transitions, a few
	// hundred bytes; 8192 states keep a schema's automata to a few MB.
	PatternStates = 8192

	// MultipleOf bounds the divisor of an integer multipleOf: the digit
	// automaton tracks the remainder, multiplying its states by it.
	MultipleOf = 1000
)
