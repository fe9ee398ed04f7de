// Command gpucompare is the arithmetic of scripts/vs-llamacpp-gpu.sh, which
// runs where there is no Go toolchain and no bc: it turns llama-bench's and
// nvmai-run bench's JSON into runs.jsonl records, reads a GGUF's header for
// the bytes a decode step reads, prints the side-by-side table and rewrites
// the marked blocks of docs/gpu.md and README.md.
//
//	gpucompare gguf-bytes FILE.gguf
//	gpucompare llama [META FLAGS] FILE.json     # llama-bench -o json → records on stdout
//	gpucompare nvmai [META FLAGS] FILE.json     # nvmai-run bench --engine gpu --json → records
//	gpucompare failed [META FLAGS] --engine E --test T --tokens N --depth D --why TEXT
//	gpucompare table RUNS.jsonl
//	gpucompare apply RUNS.jsonl FILE...         # README.md gets one line, other files the table
//
// META FLAGS: --card --driver --date --commit --llama --width --layers
// --round --first --note --weight-bytes.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpucompare:", err)
		os.Exit(1)
	}
}

func usage() error {
	return fmt.Errorf("usage: gpucompare gguf-bytes|llama|nvmai|failed|table|apply … (see the package comment of scripts/internal/gpucompare)")
}

// metaFlags registers the flags every record carries.
func metaFlags(fs *flag.FlagSet, m *Record) {
	fs.StringVar(&m.Card, "card", "", "the GPU's name")
	fs.StringVar(&m.Driver, "driver", "", "the driver version")
	fs.StringVar(&m.Date, "date", "", "when, RFC 3339 UTC")
	fs.StringVar(&m.Commit, "commit", "", "nvmai's commit")
	fs.StringVar(&m.Llama, "llama", "", "llama.cpp's version")
	fs.IntVar(&m.Width, "width", 0, "bits: 4 or 8")
	fs.IntVar(&m.Layers, "layers", 0, "decoder layers of both models")
	fs.IntVar(&m.Round, "round", 0, "round number, from 1")
	fs.StringVar(&m.First, "first", "", "the engine that went first this round")
	fs.StringVar(&m.Note, "note", "", "what the table must say about this width")
	fs.Int64Var(&m.WeightBytes, "weight-bytes", 0, "weight bytes per decode step (llama.cpp: gpucompare gguf-bytes)")
}

func emit(recs []Record) error {
	for _, r := range recs {
		line, err := jsonLine(r)
		if err != nil {
			return err
		}
		if _, err := os.Stdout.Write(line); err != nil {
			return err
		}
	}
	return nil
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("gpucompare "+cmd, flag.ContinueOnError)
	var meta Record
	switch cmd {
	case "gguf-bytes":
		if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
			return fmt.Errorf("usage: gpucompare gguf-bytes FILE.gguf")
		}
		h, err := readGGUFHeader(fs.Arg(0))
		if err != nil {
			return err
		}
		n, err := h.decodeBytesPerToken()
		if err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(0), err)
		}
		fmt.Println(n)
		return nil
	case "llama", "nvmai":
		metaFlags(fs, &meta)
		if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
			return fmt.Errorf("usage: gpucompare %s [meta flags] FILE.json", cmd)
		}
		data, err := os.ReadFile(fs.Arg(0))
		if err != nil {
			return err
		}
		parse := llamaRecords
		if cmd == "nvmai" {
			parse = nvmaiRecords
		}
		recs, err := parse(data, meta)
		if err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(0), err)
		}
		return emit(recs)
	case "failed":
		metaFlags(fs, &meta)
		fs.StringVar(&meta.Engine, "engine", "", "nvmai or llama.cpp")
		fs.StringVar(&meta.Test, "test", "", "prefill or decode")
		fs.IntVar(&meta.Tokens, "tokens", 0, "prompt or generated tokens")
		fs.IntVar(&meta.Depth, "depth", 0, "context before the test")
		fs.StringVar(&meta.Failed, "why", "", "what went wrong, in a few words")
		if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
			return fmt.Errorf("usage: gpucompare failed [meta flags] --engine E --test T --tokens N --depth D --why TEXT")
		}
		if meta.Engine != engineNvmai && meta.Engine != engineLlama || meta.Test != "prefill" && meta.Test != "decode" || meta.Failed == "" {
			return fmt.Errorf("failed: --engine must be %s or %s, --test prefill or decode, and --why given", engineNvmai, engineLlama)
		}
		return emit([]Record{meta})
	case "table":
		if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
			return fmt.Errorf("usage: gpucompare table RUNS.jsonl")
		}
		recs, err := readRecords(fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Print(table(recs))
		return nil
	case "apply":
		if err := fs.Parse(args); err != nil || fs.NArg() < 2 {
			return fmt.Errorf("usage: gpucompare apply RUNS.jsonl FILE...")
		}
		recs, err := readRecords(fs.Arg(0))
		if err != nil {
			return err
		}
		return apply(recs, fs.Args()[1:])
	}
	return usage()
}
