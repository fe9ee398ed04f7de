package cliutil

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/version"
)

// UsageError marks a command-line mistake (exit 2). Help names the command
// whose --help explains the fix ("nvmai-run chat"); Prepare fills it in.
type UsageError struct {
	Msg  string
	Help string
}

func (e *UsageError) Error() string { return e.Msg }

// Line is the one line printed for the mistake: the message and, unless it
// already points at the help, where to read more.
func (e *UsageError) Line() string {
	if e.Help == "" || strings.Contains(e.Msg, "--help") {
		return e.Msg
	}
	return fmt.Sprintf("%s (see %s --help)", e.Msg, e.Help)
}

// Usagef builds a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// withHelp names the command of a usage error that does not name one yet.
func withHelp(err error, help string) error {
	var ue *UsageError
	if errors.As(err, &ue) && ue.Help == "" {
		ue.Help = help
	}
	return err
}

var setGlobals sync.Once

// Prepare makes app behave like every nvmai command: a command-line mistake
// in the app or any of its commands (recursively) is one line on stderr and
// exit 2, never the help on stdout; --version prints "NAME VERSION"; flags
// whose usage text carried "(default: …)" show it once; USAGE lines line up.
// Run calls it; tests that run an app in-process call it through Main.
func Prepare(app *cli.App) {
	setGlobals.Do(func() {
		cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and exit"}
		cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintf(c.App.Writer, "%s %s\n", c.App.Name, c.App.Version) }
	})
	app.Version = version.String()
	app.ExitErrHandler = func(*cli.Context, error) {} // Main maps errors itself
	app.UseShortOptionHandling = true
	app.UsageText = dedent(app.UsageText)
	app.OnUsageError = onUsageError(app.Name, app.Flags)
	app.Action = wrapAction(app.Name, app.Action)
	wrapFlags(app.Name, app.Flags)
	for _, cmd := range app.Commands {
		prepareCommand(app.Name, cmd)
	}
}

func prepareCommand(parent string, cmd *cli.Command) {
	path := parent + " " + cmd.Name
	cmd.UsageText = dedent(cmd.UsageText)
	cmd.OnUsageError = onUsageError(path, cmd.Flags)
	cmd.Action = wrapAction(path, cmd.Action)
	wrapFlags(path, cmd.Flags)
	for _, sub := range cmd.Subcommands {
		prepareCommand(path, sub)
	}
}

func wrapAction(path string, act cli.ActionFunc) cli.ActionFunc {
	if act == nil {
		return nil
	}
	return func(c *cli.Context) error { return withHelp(act(c), path) }
}

// defaultInUsage finds a "(default: …)" written into a flag's usage text,
// which urfave/cli would print a second time from the flag's value.
var defaultInUsage = regexp.MustCompile(`\s*\(default:? ([^)]*)\)`)

// wrapFlags gives every flag check (a flag's Action) the command's name for
// its help hint, and moves a default written into the usage text into
// DefaultText.
func wrapFlags(path string, flags []cli.Flag) {
	for _, f := range flags {
		switch f := f.(type) {
		case *cli.IntFlag:
			f.Usage, f.DefaultText = splitDefault(f.Usage, f.DefaultText)
			if act := f.Action; act != nil {
				f.Action = func(c *cli.Context, v int) error { return withHelp(act(c, v), path) }
			}
		case *cli.Int64Flag:
			f.Usage, f.DefaultText = splitDefault(f.Usage, f.DefaultText)
			if act := f.Action; act != nil {
				f.Action = func(c *cli.Context, v int64) error { return withHelp(act(c, v), path) }
			}
		case *cli.Uint64Flag:
			f.Usage, f.DefaultText = splitDefault(f.Usage, f.DefaultText)
			if act := f.Action; act != nil {
				f.Action = func(c *cli.Context, v uint64) error { return withHelp(act(c, v), path) }
			}
		case *cli.Float64Flag:
			f.Usage, f.DefaultText = splitDefault(f.Usage, f.DefaultText)
			if act := f.Action; act != nil {
				f.Action = func(c *cli.Context, v float64) error { return withHelp(act(c, v), path) }
			}
		case *cli.StringFlag:
			f.Usage, f.DefaultText = splitDefault(f.Usage, f.DefaultText)
			if act := f.Action; act != nil {
				f.Action = func(c *cli.Context, v string) error { return withHelp(act(c, v), path) }
			}
		}
	}
}

func splitDefault(usage, defaultText string) (string, string) {
	m := defaultInUsage.FindStringSubmatchIndex(usage)
	if m == nil || defaultText != "" {
		return usage, defaultText
	}
	return usage[:m[0]] + usage[m[1]:], usage[m[2]:m[3]]
}

// dedent strips the leading blanks of every line: urfave/cli indents the
// lines of a multi-line UsageText itself.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimLeft(l, " \t")
	}
	return strings.Join(lines, "\n")
}

// onUsageError turns the flag parser's complaint into one UsageError line.
func onUsageError(path string, flags []cli.Flag) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return &UsageError{Msg: describeParseError(err.Error(), flags), Help: path}
	}
}

var (
	notDefined   = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	invalidValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]*): (.*)$`)
	needsValue   = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

func describeParseError(msg string, flags []cli.Flag) string {
	if m := notDefined.FindStringSubmatch(msg); m != nil {
		out := "unknown flag " + dashed(m[1])
		if s := suggestFlag(m[1], flags); s != "" {
			out += "; did you mean " + dashed(s) + "?"
		}
		return out
	}
	if m := invalidValue.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("invalid value %q for %s: %s", m[1], dashed(m[2]), expected(lookupFlag(m[2], flags), m[3]))
	}
	if m := needsValue.FindStringSubmatch(msg); m != nil {
		return dashed(m[1]) + " needs a value"
	}
	return msg
}

// expected says what a flag of f's kind accepts, after the parser's reason
// ("parse error", "value out of range").
func expected(f cli.Flag, reason string) string {
	what := ""
	switch f.(type) {
	case *cli.IntFlag, *cli.Int64Flag:
		what = "a whole number"
	case *cli.UintFlag, *cli.Uint64Flag:
		what = "a whole number, 0 or more"
	case *cli.Float64Flag:
		what = "a number"
	case *cli.BoolFlag:
		what = "true or false"
	case *cli.DurationFlag:
		what = "a duration such as 30s or 5m"
	}
	switch {
	case what == "":
		return reason
	case strings.Contains(reason, "out of range"):
		return "too large; want " + what + " within range"
	}
	return "want " + what
}

// dashed spells a flag name as it is typed: -n, --max-tokens.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func lookupFlag(name string, flags []cli.Flag) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// suggestFlag is the flag name nearest to name by edit distance, when near
// enough to be a typo (at most 2 edits, and at most half the letters).
func suggestFlag(name string, flags []cli.Flag) string {
	best, bestDist := "", 3
	for _, f := range append(flags, cli.HelpFlag) {
		if f == nil {
			continue
		}
		for _, n := range f.Names() {
			if len(n) < 2 {
				continue
			}
			if d := editDistance(name, n); d < bestDist && 2*d <= len(n) {
				best, bestDist = n, d
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
