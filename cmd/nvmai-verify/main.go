// Command nvmai-verify checks nvmai installs: --verify-install re-hashes an
// install against its receipt and manifest.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/verify"
)

func main() { cliutil.Run(app()) }

func app() *cli.App {
	return &cli.App{
		Name:      "nvmai-verify",
		Usage:     "check nvmai installs against their receipts",
		UsageText: "nvmai-verify --verify-install DIR [--json] [--reissue]",
		Description: `--verify-install re-hashes every payload file of DIR against verified-install.json, checks the
manifest (ceilings, tensor ranges inside their files, expert files of exactly experts × stride
bytes), that the tokenizer and configs are present and that no stray file was added. Exit status 0
when sound, 1 with every problem listed (file, expected, found). --reissue rewrites the receipt, and
only after a full check found nothing wrong but the receipt itself.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "verify-install", Usage: "install `DIR` to check", Required: true},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON on stdout"},
			&cli.BoolFlag{Name: "reissue", Usage: "rewrite verified-install.json after a successful full check"},
			&cli.IntFlag{Name: "threads", Value: runtime.NumCPU(), Usage: "files hashed in parallel"},
		},
		Action: verifyInstall,
	}
}

func verifyInstall(c *cli.Context) error {
	rep, err := verify.Install(c.String("verify-install"), c.Int("threads"), c.Bool("reissue"))
	if err != nil {
		return err
	}
	if c.Bool("json") {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReport(rep)
	}
	if !rep.OK() {
		return cli.Exit("", cliutil.ExitFailure)
	}
	return nil
}

func printReport(rep *verify.Report) {
	for _, p := range rep.Problems {
		fmt.Printf("FAIL %s\n", p)
	}
	status := "ok"
	if !rep.OK() {
		status = fmt.Sprintf("%d problem(s)", len(rep.Problems))
	}
	fmt.Printf("%s: %s (%s %d-bit, %d files, %s hashed)", rep.Dir, status, rep.ModelID, rep.Bits, rep.Files, cliutil.HumanBytes(rep.Bytes))
	if rep.Reissued {
		fmt.Print("; receipt reissued")
	}
	fmt.Println()
}
