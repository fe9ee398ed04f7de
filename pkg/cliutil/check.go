package cliutil

import (
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// MaxThreads bounds every thread-count flag; far beyond any core count.
const MaxThreads = 4096

// IntRange makes f refuse a value outside [lo, hi] with exit 2 and the
// range; note names special values ("0 = all cores") in the message. The
// check runs whenever the flag is set, in every command that has it.
func IntRange(f *cli.IntFlag, lo, hi int, note string) *cli.IntFlag {
	name := f.Name
	f.Action = func(_ *cli.Context, v int) error { return CheckRange(name, int64(v), int64(lo), int64(hi), note) }
	return f
}

// Uint64Range is IntRange for a Uint64Flag.
func Uint64Range(f *cli.Uint64Flag, lo, hi uint64, note string) *cli.Uint64Flag {
	name := f.Name
	f.Action = func(_ *cli.Context, v uint64) error {
		if v < lo || v > hi {
			return rangeError(dashed(name), strconv.FormatUint(v, 10), strconv.FormatUint(lo, 10), strconv.FormatUint(hi, 10), note)
		}
		return nil
	}
	return f
}

// CheckRange is the one message for a number outside its range:
// "--threads -4 is out of range: use 0 (all cores) to 4096".
func CheckRange(name string, v, lo, hi int64, note string) error {
	if v >= lo && v <= hi {
		return nil
	}
	return rangeError(dashed(name), strconv.FormatInt(v, 10), strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10), note)
}

func rangeError(what, v, lo, hi, note string) error {
	if note != "" {
		note = " (" + note + ")"
	}
	return Usagef("%s %s is out of range: use %s to %s%s", what, v, lo, hi, note)
}

// ThreadsFlag is a compute-thread count: 0 or unset means every core, a
// negative or absurd count is refused, and a count above the cores is
// lowered to them with one warning (more threads than cores only slow a
// CPU-bound step down).
func ThreadsFlag(usage string, aliases ...string) *cli.IntFlag {
	f := &cli.IntFlag{Name: "threads", Aliases: aliases, Usage: usage, DefaultText: "all cores"}
	f.Action = func(c *cli.Context, v int) error {
		if err := CheckRange("threads", int64(v), 0, MaxThreads, "0 = all cores"); err != nil {
			return err
		}
		if cores := goruntime.NumCPU(); v > cores {
			Warnf(c, "--threads %d is more than the %d cores; using %d", v, cores, cores)
			return c.Set("threads", strconv.Itoa(cores))
		}
		return nil
	}
	return f
}

// Warnf prints one warning line on the app's stderr.
func Warnf(c *cli.Context, format string, args ...any) {
	fmt.Fprintf(c.App.ErrWriter, "%s: warning: %s\n", c.App.Name, fmt.Sprintf(format, args...))
}

// Exclusive refuses a command line that sets more than one of the flags:
// "give --prompt or --prompt-file, not both".
func Exclusive(c *cli.Context, names ...string) error {
	var set []string
	for _, n := range names {
		if c.IsSet(n) {
			set = append(set, dashed(n))
		}
	}
	if len(set) < 2 {
		return nil
	}
	if len(set) == 2 {
		return Usagef("give %s, not both", strings.Join(set, " or "))
	}
	return Usagef("give only one of %s", strings.Join(set, ", "))
}

// EnvInt reads an integer environment variable that must lie in [lo, hi]
// when set; ok is false when it is unset or empty.
func EnvInt(name string, lo, hi int64, note string) (v int64, ok bool, err error) {
	s := os.Getenv(name)
	if s == "" {
		return 0, false, nil
	}
	v, perr := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if perr != nil || v < lo || v > hi {
		if note != "" {
			note = " (" + note + ")"
		}
		return 0, false, Usagef("%s=%s: use a whole number from %d to %d%s", name, s, lo, hi, note)
	}
	return v, true, nil
}
