// Command nvmai-install downloads a registered model from the Hugging Face
// Hub, converts it at the requested widths and verifies each install.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/download"
	"github.com/nvmai/nvmai/pkg/install"
	"github.com/nvmai/nvmai/pkg/registry"
)

func main() { cliutil.Run(app()) }

func app() *cli.App {
	return &cli.App{
		Name:  "nvmai-install",
		Usage: "download, convert and verify a model",
		UsageText: `nvmai-install                          (status table of the registry and what is installed)
   nvmai-install katcoder both            (KAT-Coder 35B-A3B at 4 and 8 bits from one download)
   nvmai-install qwen36 8bit | nvmai-install katcoder-8bit
   nvmai-install --repo ORG/NAME --revision REV --bits 4,8
   nvmai-install --offline qwen36 8bit    (from the Hugging Face cache only; also HF_HUB_OFFLINE=1)`,
		Description: `Downloads the model's safetensors, configs and tokenizer into the Hugging Face cache
($HF_HOME/hub, reused by other tools and by later installs: a second width never re-fetches),
converts every requested width from that one download into --models-dir/NAME-4bit and NAME-8bit,
and verifies each install before reporting it. Downloads resume after Ctrl-C or a network failure.
HF_TOKEN (or the token saved by 'hf auth login') is sent to the Hub host only; HF_ENDPOINT selects
another Hub. --offline (or HF_HUB_OFFLINE=1) installs from the cache alone, with no network request:
a branch or tag is looked up in the cache's refs/, a 40-hex commit in its snapshots/.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "models-dir", Value: "models", Usage: "where installs are written"},
			&cli.StringFlag{Name: "repo", Usage: "install any compatible Hub repository `ORG/NAME` instead of a registry name"},
			&cli.StringFlag{Name: "revision", Usage: "branch, tag or commit of --repo", DefaultText: "main"},
			&cli.StringFlag{Name: "bits", Value: "4", Usage: "widths for --repo: 4, 8, 16 or 4,8"},
			&cli.BoolFlag{Name: "overwrite", Usage: "rebuild widths that are already installed"},
			&cli.IntFlag{Name: "threads", Usage: "conversion threads", DefaultText: "all cores"},
			&cli.IntFlag{Name: "parallel", Value: 3, Usage: "download chunks in flight"},
			&cli.BoolFlag{Name: "offline", Usage: "install from the Hugging Face cache only; no network request (also HF_HUB_OFFLINE=1)"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress, retry or notice lines (errors still print)"},
		},
		Action: installAction,
	}
}

func installAction(c *cli.Context) error {
	if c.NArg() == 0 && c.String("repo") == "" {
		return printStatus(c.String("models-dir"))
	}
	entry, widths, err := target(c)
	if err != nil {
		return err
	}
	client := download.NewClient()
	client.Parallel = c.Int("parallel")
	var progress download.Progress = download.NopProgress{}
	if !c.Bool("quiet") {
		rep := download.NewReporter(os.Stderr, cliutil.IsTerminal(os.Stderr))
		defer rep.Close()
		progress = rep
	}
	var notice func(string)
	if !c.Bool("quiet") {
		notice = func(m string) { fmt.Fprintln(os.Stderr, m) }
	}
	results, err := install.Run(c.Context, entry, widths, install.Options{
		ModelsDir: c.String("models-dir"), Client: client, Progress: progress, Overwrite: c.Bool("overwrite"),
		Offline: c.Bool("offline"), Threads: c.Int("threads"), Notice: notice,
	})
	install.WriteResults(os.Stdout, results)
	return err
}

func target(c *cli.Context) (registry.Entry, []int, error) {
	if repo := c.String("repo"); repo != "" {
		if c.NArg() > 0 {
			return registry.Entry{}, nil, cliutil.Usagef("give a registry name or --repo, not both")
		}
		e, err := install.CustomEntry(repo, c.String("revision"))
		if err != nil {
			return e, nil, cliutil.Usagef("%v", err)
		}
		bits, err := convert.ParseBits(c.String("bits"))
		if err != nil {
			return e, nil, cliutil.Usagef("%v", err)
		}
		return e, bits, nil
	}
	e, widths, err := registry.ParseTarget(c.Args().Slice())
	if err != nil {
		return e, nil, cliutil.Usagef("%v", err)
	}
	return e, widths, nil
}

func printStatus(modelsDir string) error {
	rep, err := install.ReadStatus(modelsDir)
	if err != nil {
		return err
	}
	return rep.Write(os.Stdout)
}
