// Command nvmai-verify checks nvmai installs (--verify-install re-hashes an
// install against its receipt and manifest) and runs the golden release gate
// (golden: fixed greedy generations compared byte for byte with stored
// baselines, with a coverage guard and a proof that the models directory was
// not touched).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/verify"
)

func main() { cliutil.Run(app()) }

func app() *cli.App {
	return &cli.App{
		Name:  "nvmai-verify",
		Usage: "check nvmai installs against their receipts, and golden baselines",
		UsageText: `nvmai-verify --verify-install DIR [--json] [--reissue [--trust-current-bytes]]
nvmai-verify golden --models-dir DIR [--golden-dir benchmark/golden] [--record [--force]] [--json]`,
		Description: `--verify-install re-hashes every payload file of DIR against verified-install.json, checks the
manifest (ceilings, tensor ranges inside their files, expert files of exactly experts × stride
bytes), that the tokenizer and configs are present and that no stray file was added. Exit status 0
when sound, 1 with every problem listed (file, expected, found), 2 for a bad command line, 130
interrupted. --json prints the report with a top-level "ok" (true or false), or, when no report
could be made (no such directory), {"ok": false, "error": "…"}.
--reissue rewrites the receipt in canonical form, and only after every file matched the hash the
old receipt gives it (a reformatted receipt still holds its hashes). With no usable receipt it
refuses, unless --trust-current-bytes is also given: the files are then hashed as they are and
recorded, checked against nothing.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "verify-install", Usage: "install `DIR` to check"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON on stdout"},
			&cli.BoolFlag{Name: "reissue", Usage: "rewrite verified-install.json after a successful full check"},
			&cli.BoolFlag{Name: "trust-current-bytes", Usage: "with --reissue and no usable receipt: record the files as they are now, unchecked"},
			cliutil.IntRange(&cli.IntFlag{Name: "threads", Value: runtime.NumCPU(), Usage: "files hashed in parallel"}, 1, cliutil.MaxThreads, ""),
		},
		Commands: []*cli.Command{goldenCommand()},
		Action:   verifyInstall,
	}
}

func verifyInstall(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q (commands: golden; or use --verify-install DIR)", c.Args().First())
	}
	if c.String("verify-install") == "" {
		return cliutil.Usagef("nothing to do: give --verify-install DIR, or the golden command (see --help)")
	}
	if c.Bool("trust-current-bytes") && !c.Bool("reissue") {
		return cliutil.Usagef("--trust-current-bytes only applies with --reissue")
	}
	rep, err := verify.CheckInstall(c.Context, c.String("verify-install"), verify.InstallOptions{
		Threads: c.Int("threads"), Reissue: c.Bool("reissue"), TrustCurrentBytes: c.Bool("trust-current-bytes")})
	if err != nil {
		return notRun(c, c.String("verify-install"), err)
	}
	return outcome(c, rep.OK(), struct {
		OK bool `json:"ok"`
		*verify.Report
	}{rep.OK(), rep}, func(w io.Writer) { printReport(w, rep) }, "")
}

// outcome writes a finished check's report: v (the report with its "ok")
// on stdout under --json, else print's lines; a report that is not ok
// exits 1 with failure as the message.
func outcome(c *cli.Context, ok bool, v any, print func(io.Writer), failure string) error {
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, v); err != nil {
			return err
		}
	} else {
		print(c.App.Writer)
	}
	if !ok {
		return cli.Exit(failure, cliutil.ExitFailure)
	}
	return nil
}

// notRun prints, with --json, an error object naming dir on stdout for a
// check that could not run, and returns err.
func notRun(c *cli.Context, dir string, err error) error {
	if c.Bool("json") {
		writeJSON(c.App.Writer, jsonError{Dir: dir, Error: err.Error()})
	}
	return err
}

// jsonError is what --json prints on stdout when no report could be made,
// so a script reading stdout always gets an object with "ok".
type jsonError struct {
	OK    bool   `json:"ok"` // always false
	Dir   string `json:"dir,omitempty"`
	Error string `json:"error"`
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func printReport(w io.Writer, rep *verify.Report) {
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "FAIL %s\n", p)
	}
	status := "ok"
	if !rep.OK() {
		status = fmt.Sprintf("%d problem(s)", len(rep.Problems))
	}
	fmt.Fprintf(w, "%s: %s (%s %d-bit, %d files, %s hashed)", rep.Dir, status, rep.ModelID, rep.Bits, rep.Files, cliutil.HumanBytes(rep.Bytes))
	switch {
	case rep.Trusted:
		fmt.Fprint(w, "; receipt written from the files as they are (--trust-current-bytes: nothing checked them)")
	case rep.Reissued:
		fmt.Fprint(w, "; receipt reissued (every file matched the old receipt)")
	}
	fmt.Fprintln(w)
}
