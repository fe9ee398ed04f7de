package cliutil

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// NormalizeArgs rewrites a command line (args[0] is the program) so that
// urfave/cli, which stops at the first positional argument, reads it the way
// people type it:
//
//   - flags after positional arguments move before them
//     (nvmai-install qwen36 4bit --models-dir X);
//   - flags given before a subcommand's name that the subcommand defines
//     move after the name (nvmai-run --model M chat), because the
//     subcommand's own, unset copy of the flag would otherwise win.
//
// It knows which flags take a value, so "--prompt hi" stays one flag; "--"
// ends the flags as usual. A flag before a subcommand that the subcommand
// does not know is a usage error naming where it belongs.
func NormalizeArgs(app *cli.App, args []string) ([]string, error) {
	if len(args) == 0 {
		return args, nil
	}
	rest, err := normalize(app.Name, app.Flags, app.Commands, args[1:])
	return append([]string{args[0]}, rest...), err
}

// flagGroup is one flag as typed: its name and its words ("--seed", "7").
type flagGroup struct {
	name  string
	words []string
}

func normalize(path string, flags []cli.Flag, cmds []*cli.Command, args []string) ([]string, error) {
	takes := valueFlags(flags)
	var groups []flagGroup
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i:]...)
			break
		}
		if name, inline, ok := flagName(a); ok {
			g := flagGroup{name, []string{a}}
			if !inline && takes[name] && i+1 < len(args) {
				i++
				g.words = append(g.words, args[i])
			}
			groups = append(groups, g)
			continue
		}
		if len(positional) == 0 {
			if sub := findCommand(cmds, a); sub != nil {
				return intoCommand(path, takes, sub, a, groups, args[i+1:])
			}
		}
		positional = append(positional, a)
	}
	var out []string
	for _, g := range groups {
		out = append(out, g.words...)
	}
	return append(out, positional...), nil
}

// intoCommand hands the flags given before sub's name to sub when it defines
// them. The help and version flags, and flags neither knows (the parent's
// parser reports those), stay with the parent; a flag only the parent
// defines is a mistake, since sub would silently ignore it.
func intoCommand(path string, parentFlags map[string]bool, sub *cli.Command, name string, before []flagGroup, after []string) ([]string, error) {
	subPath := path + " " + sub.Name
	subFlags := valueFlags(sub.Flags)
	var parent, moved []string
	for _, g := range before {
		_, known := subFlags[g.name]
		_, parentKnows := parentFlags[g.name]
		switch {
		case known:
			moved = append(moved, g.words...)
		case !parentKnows || g.name == "help" || g.name == "h" || g.name == "version":
			parent = append(parent, g.words...)
		default:
			return nil, &UsageError{Msg: dashed(g.name) + " does not apply to " + subPath, Help: subPath}
		}
	}
	rest, err := normalize(subPath, sub.Flags, sub.Subcommands, after)
	if err != nil {
		return nil, err
	}
	out := append(parent, name)
	out = append(out, moved...)
	return append(out, rest...), nil
}

// valueFlags maps every name of flags to whether it takes a value.
func valueFlags(flags []cli.Flag) map[string]bool {
	m := map[string]bool{}
	for _, f := range flags {
		takes := true
		if d, ok := f.(cli.DocGenerationFlag); ok {
			takes = d.TakesValue()
		}
		for _, n := range f.Names() {
			m[n] = takes
		}
	}
	return m
}

// flagName reports whether a looks like a flag, its name, and whether its
// value is inline (--name=value).
func flagName(a string) (name string, inline, ok bool) {
	if len(a) < 2 || a[0] != '-' {
		return "", false, false
	}
	name = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	name, _, inline = strings.Cut(name, "=")
	return name, inline, name != ""
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		for _, n := range c.Names() {
			if n == name {
				return c
			}
		}
	}
	return nil
}
