// Command nvmai-install downloads a registered model from the Hugging Face
// Hub, converts it at the requested widths and verifies each install.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/download"
	"github.com/nvmai/nvmai/pkg/install"
	"github.com/nvmai/nvmai/pkg/registry"
)

func main() { cliutil.Run(app()) }

// maxParallel bounds --parallel: more requests in flight only queue at the Hub.
const maxParallel = 64

func app() *cli.App {
	return &cli.App{
		Name:  "nvmai-install",
		Usage: "download, convert and verify a model",
		UsageText: `nvmai-install                          (status table of the registry and what is installed)
   nvmai-install katcoder both            (KAT-Coder 35B-A3B at 4 and 8 bits from one download)
   nvmai-install qwen36 8bit | nvmai-install katcoder-8bit | nvmai-install qwen36 4bit,16bit
   nvmai-install --repo ORG/NAME --revision REV --bits 4,8
   nvmai-install --offline qwen36 8bit    (from the Hugging Face cache only; also HF_HUB_OFFLINE=1)`,
		Description: `Downloads the model's safetensors, configs and tokenizer into the Hugging Face cache
($HF_HOME/hub, reused by other tools and by later installs: a second width never re-fetches),
converts every requested width from that one download into --models-dir/NAME-4bit and NAME-8bit,
and verifies each install before reporting it. Downloads resume after Ctrl-C or a network failure.
HF_TOKEN (or the token saved by 'hf auth login') is sent to the Hub host only; HF_ENDPOINT selects
another Hub. --offline (or HF_HUB_OFFLINE=1) installs from the cache alone, with no network request:
a branch or tag is looked up in the cache's refs/, a 40-hex commit in its snapshots/.

Widths, in either form (NAME WIDTHS or --repo … --bits WIDTHS): 4, 8 or 16 (the exact bf16 copy),
written 4, 4bit or 4-bit, or a comma list such as 4,8 or 4bit,16bit; "both" is 4,8. Flags may come
before or after NAME.
Exit status: 0 installed (or already installed and verified), 1 the install failed, 2 a bad command
line, 130 interrupted.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "models-dir", Value: "models", Usage: "where installs are written"},
			&cli.StringFlag{Name: "repo", Usage: "install any compatible Hub repository `ORG/NAME` instead of a registry name"},
			&cli.StringFlag{Name: "revision", Usage: "branch, tag or commit of --repo", DefaultText: "main"},
			&cli.StringFlag{Name: "bits", Value: "4", Usage: "widths for --repo: 4, 8, 16 or a comma list such as 4,8"},
			&cli.BoolFlag{Name: "overwrite", Usage: "rebuild widths that are already installed"},
			cliutil.ThreadsFlag("conversion threads"),
			cliutil.IntRange(&cli.IntFlag{Name: "parallel", Value: download.DefaultParallel, Usage: "download chunks in flight"}, 1, maxParallel, ""),
			&cli.BoolFlag{Name: "offline", Usage: "install from the Hugging Face cache only; no network request (also HF_HUB_OFFLINE=1)"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress, retry or notice lines (errors still print)"},
		},
		Action: installAction,
	}
}

func installAction(c *cli.Context) error {
	if c.NArg() == 0 && c.String("repo") == "" {
		return printStatus(c.App.Writer, c.String("models-dir"))
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
	install.WriteResults(c.App.Writer, results)
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
		widths, err := parseWidths(c.String("bits"), e)
		return e, widths, err
	}
	args := c.Args().Slice()
	if c.IsSet("bits") {
		return registry.Entry{}, nil, cliutil.Usagef("--bits is for --repo; after a registry name write the widths as a word: %s 4bit, 8bit, 16bit or both", args[0])
	}
	if len(args) > 2 {
		return registry.Entry{}, nil, cliutil.Usagef("want NAME [WIDTHS], got %d arguments: %s", len(args), strings.Join(args, " "))
	}
	name, suffix := splitWidthSuffix(args[0])
	e, named, err := registry.ParseTarget([]string{name})
	if err != nil {
		return e, nil, cliutil.Usagef("%v", err)
	}
	if suffix != 0 {
		named = []int{suffix}
	}
	if len(args) == 1 {
		return e, named, nil
	}
	widths, err := parseWidths(args[1], e)
	if err != nil {
		return e, nil, err
	}
	if name != args[0] || e.Width != 0 {
		if !slices.Equal(widths, named) {
			return e, nil, cliutil.Usagef("%q asks for %d-bit but %q for %s", args[0], named[0], args[1], registry.WidthList(widths))
		}
	}
	return e, widths, nil
}

// sixteenSuffix matches a 16-bit spelling at the end of a registry name
// ("qwen36-16bit"), which the registry's own names do not carry.
var sixteenSuffix = regexp.MustCompile(`[-_:]16(-?bit)?$`)

func splitWidthSuffix(name string) (string, int) {
	if loc := sixteenSuffix.FindStringIndex(name); loc != nil {
		return name[:loc[0]], 16
	}
	return name, 0
}

// parseWidths reads the widths of either form, NAME WIDTHS or --bits
// WIDTHS: 4, 8 or 16, each written 4, 4bit or 4-bit, comma-separated;
// "both" (or "all") are the quantized widths the entry offers. 16 (the exact
// bf16 copy) is always offered: the converter writes it for any model.
func parseWidths(arg string, e registry.Entry) ([]int, error) {
	var nums []string
	for _, f := range strings.Split(arg, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		switch f {
		case "both", "all":
			for _, w := range e.Widths {
				nums = append(nums, strconv.Itoa(w))
			}
			continue
		}
		f = strings.TrimSuffix(strings.TrimSuffix(f, "bit"), "-")
		nums = append(nums, f)
	}
	widths, err := convert.ParseBits(strings.Join(nums, ","))
	var unsupported *convert.BitsError
	switch {
	case errors.As(err, &unsupported):
		return nil, cliutil.Usagef("%v", err)
	case err != nil:
		return nil, cliutil.Usagef("widths %q: want 4, 8 or 16 (also written 4bit or 4-bit), a comma list such as 4,8, or both", arg)
	}
	for _, w := range widths {
		if w != 16 && !slices.Contains(e.Widths, w) {
			return nil, cliutil.Usagef("%s comes in %s (and 16-bit, the exact bf16 copy), not %d-bit", e.Name, registry.WidthList(e.Widths), w)
		}
	}
	return widths, nil
}

func printStatus(w io.Writer, modelsDir string) error {
	rep, err := install.ReadStatus(modelsDir)
	if err != nil {
		return err
	}
	return rep.Write(w)
}
