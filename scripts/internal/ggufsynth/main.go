// Command ggufsynth writes a GGUF file of the synthetic Qwen3.5-35B-A3B
// geometry (the one `nvmai-convert synth --geometry qwen3.5-35b-a3b` uses)
// for llama.cpp's qwen35moe architecture, with seeded random weights, so
// llama.cpp can be timed on the same model shape as nvmai
// (scripts/vs-llamacpp.sh drives it).
//
//	go run ./scripts/internal/ggufsynth --output m.gguf --layers 4 --type q4_0 --embd-type q8_0 --output-type q8_0
//	go run ./scripts/internal/ggufsynth --selftest --lib-dir DIR   # Q4_0/Q8_0 vs libggml-base, bit for bit
//
// Q4_0 and Q8_0 blocks come from this program's own quantizers; --selftest
// compares them with ggml_quantize_chunk of the libggml-base.so that
// node-llama-cpp ships. The bytes depend only on the seed, the types and the
// layer count, never on --threads.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/nvmai/nvmai/pkg/convert"
)

// generator names the value stream; bump it when a seed would give other bytes.
const generator = "nvmai-ggufsynth-1"

func main() {
	out := flag.String("output", "", "GGUF `FILE` to write")
	layers := flag.Int("layers", 40, "decoder layers, 1..40 (the 3 linear + 1 full pattern is kept)")
	wtype := flag.String("type", "q4_0", "type of every big matrix: q4_0 or q8_0")
	embd := flag.String("embd-type", "", "token_embd type (default --type); nvmai's 4-bit installs keep it at 8 bits")
	outType := flag.String("output-type", "", "output (lm_head) type (default --type)")
	seed := flag.Uint64("seed", 0, "random seed")
	threads := flag.Int("threads", runtime.NumCPU(), "generator threads")
	overwrite := flag.Bool("overwrite", false, "replace an existing FILE")
	dry := flag.Bool("dry-run", false, "list the tensors and the file size, write nothing")
	selftest := flag.Bool("selftest", false, "compare the Q4_0/Q8_0 quantizers with libggml-base's and exit")
	libDir := flag.String("lib-dir", defaultLibDir(), "directory of node-llama-cpp's libggml-base.so (for --selftest)")
	flag.Parse()
	if err := run(*out, *layers, *wtype, *embd, *outType, *seed, *threads, *overwrite, *dry, *selftest, *libDir); err != nil {
		fmt.Fprintln(os.Stderr, "ggufsynth:", err)
		os.Exit(1)
	}
}

func defaultLibDir() string {
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "nvmai-llamacpp", "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
}

func parseType(s, def string) (ggmlType, error) {
	if s == "" {
		s = def
	}
	switch s {
	case "q4_0":
		return typeQ4_0, nil
	case "q8_0":
		return typeQ8_0, nil
	}
	return ggmlType{}, fmt.Errorf("type %q: choose q4_0 or q8_0", s)
}

func run(out string, layers int, wtype, embd, outType string, seed uint64, threads int, overwrite, dry, selftest bool, libDir string) error {
	if selftest {
		return runSelftest(libDir)
	}
	if threads < 1 {
		return fmt.Errorf("--threads %d: must be at least 1", threads)
	}
	sg, err := convert.LookupSynthGeometry("qwen3.5-35b-a3b", layers)
	if err != nil {
		return err
	}
	var ty types
	if ty.weights, err = parseType(wtype, ""); err != nil {
		return err
	}
	if ty.embedding, err = parseType(embd, wtype); err != nil {
		return err
	}
	if ty.output, err = parseType(outType, wtype); err != nil {
		return err
	}
	tensors, dataSize, err := buildTensors(sg.Geometry, ty)
	if err != nil {
		return err
	}
	label := fmt.Sprintf("%s (token_embd %s, output %s)", ty.weights.name, ty.embedding.name, ty.output.name)
	header, err := encodeHeader(buildKV(sg.Geometry, ty, seed, label), tensors)
	if err != nil {
		return err
	}
	total := int64(len(header)) + dataSize
	if dry {
		for _, t := range tensors {
			fmt.Printf("%-36s %-5s ne=%v %d B\n", t.name, t.typ.name, t.ne, t.bytes())
		}
		fmt.Printf("%d tensors, header %d B, file %d B\n", len(tensors), len(header), total)
		return nil
	}
	if out == "" {
		return fmt.Errorf("--output FILE is required")
	}
	if _, err := os.Stat(out); err == nil && !overwrite {
		return fmt.Errorf("%s exists; pass --overwrite to replace it", out)
	}
	start := time.Now()
	if err := writeFile(out, header, tensors, total, seed, threads); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(os.Stderr, "wrote %s: %d tensors, %d B (%.2f GiB) in %.1f s (%.0f MB/s)\n",
		out, len(tensors), total, float64(total)/(1<<30), secs, float64(total)/secs/1e6)
	return nil
}
