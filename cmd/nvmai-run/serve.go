package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/expertcache"
	nvmodel "github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/promptcache"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/anthropic"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/modeldir"
	"github.com/nvmai/nvmai/pkg/server/openai"
	"github.com/nvmai/nvmai/pkg/server/responses"
	"github.com/nvmai/nvmai/pkg/server/sse"
	"github.com/nvmai/nvmai/pkg/server/webui"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "serve the model over HTTP: the OpenAI, Anthropic Messages and Responses APIs",
		UsageText: "nvmai-run serve (--model DIR | --models-dir DIR) [--host 127.0.0.1] [--port 8080] [--api-key KEY]",
		Description: `Endpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, POST /v1/messages,
POST /v1/messages/count_tokens, GET /v1/models, POST /apply-template,
GET /health, GET /metrics, GET /v1/live; the web page at GET / (--no-webui: off). Up to --parallel generations run at once (default: as many as fit in memory, at most 4; 1 on the GPU for now),
decoded together in batched steps, each output identical to the request alone; others wait in FIFO
order (--queue-limit). Binds
127.0.0.1 unless --host says otherwise, which then requires --api-key. With --models-dir, every
verified install under DIR is served by its path there; the model a request names is loaded
when its turn comes (one in memory at a time).`,
		Flags: append(append(append(modelFlags(), scriptedFlags...),
			&cli.StringFlag{Name: "host", Value: "127.0.0.1", Usage: "address to listen on; anything but loopback needs --api-key"},
			&cli.IntFlag{Name: "port", Value: 8080, Usage: "TCP port"},
			&cli.StringFlag{Name: "api-key", Usage: "require this key (Authorization: Bearer KEY or x-api-key: KEY)", EnvVars: []string{"NVMAI_API_KEY"}},
			&cli.StringFlag{Name: "cors-origin", Usage: "allow browser requests from this origin (\"*\" for any); default none"},
			&cli.StringFlag{Name: "model-id", Usage: "model id reported by /v1/models", DefaultText: "the install directory's name"},
			&cli.IntFlag{Name: "queue-limit", Value: 4, Usage: "requests that may wait behind the running ones; more get 429"},
			cliutil.IntRange(&cli.IntFlag{Name: "parallel", Value: 1, Usage: "generations in flight at once, decoded together in batched steps, each output identical to the request served alone (the qwen35 CPU and GPU engines; each holds its own sequence state, in device memory on the GPU)", DefaultText: "as many sequence states as fit in memory, at most 4; 1 on the GPU until its batched step is validated there (--parallel N opts in), and where batching is not available"}, 1, server.MaxParallel, ""),
			&cli.BoolFlag{Name: "no-constrain-tools", Usage: "leave tool calls unconstrained (free text parsed after the fact); by default, once the model opens a <tool_call> only a well-formed call of a declared tool can follow (docs/structured-output.md)"},
			&cli.BoolFlag{Name: "strict-max-tokens", Usage: "refuse (400) a request whose prompt plus max_tokens exceeds the context, instead of lowering max_tokens to what fits (finish reason length at the context, said in the log line)"},
			&cli.StringFlag{Name: "prompt-cache", Value: "512M", Usage: "RAM for model-state snapshots reused across turns (0 = off)"},
			&cli.StringFlag{Name: "prompt-cache-dir", Usage: "also keep snapshots of long prefixes (an agent's system prompt and tools) in `DIR`, where a restarted server finds them"},
			&cli.StringFlag{Name: "prompt-cache-disk-budget", Value: "20G", Usage: "most bytes of snapshot files kept in --prompt-cache-dir (least recently used go first)"},
			&cli.StringFlag{Name: "max-body", Value: "4M", Usage: "largest request body"},
			&cli.StringFlag{Name: "thinking", Usage: "default for enable_thinking when a request does not say: on or off", DefaultText: "the template's default"},
			&cli.StringFlag{Name: "chat-template", Usage: "Jinja chat template `FILE` to use instead of the install's"},
			&cli.IntFlag{Name: "max-connections", Value: 64, Usage: "most open client connections; when all are open, the longest-idle one is closed for a newcomer"},
			&cli.DurationFlag{Name: "stream-write-timeout", Value: sse.DefaultWriteTimeout, Usage: "cut off a stream whose client accepts no bytes for this long (freeing the engine for others)"},
			&cli.StringSliceFlag{Name: "allowed-host", Usage: "also accept requests whose Host header is `NAME` (or NAME:PORT); repeatable. Without --api-key only loopback names and --host are accepted"},
			&cli.BoolFlag{Name: "log-json", Usage: "log one JSON object per request instead of a text line"},
			&cli.BoolFlag{Name: "no-webui", Usage: "do not serve the web page at GET / (the chat page and live panel; the API is unaffected)"},
			&cli.IntFlag{Name: "responses-keep", Value: responses.DefaultKeep, Usage: "newest /v1/responses responses held in memory for previous_response_id (0 = none)"},
			&cli.StringFlag{Name: "models-dir", Usage: "serve every verified install under `DIR` (ids: their paths there), one loaded at a time, instead of --model"},
			&cli.DurationFlag{Name: "idle-unload", Usage: "with --models-dir: unload the model after this long without requests (e.g. 10m)", DefaultText: "never"},
		), serveRoutingFlags()...),
		Action: serveAction,
	}
}

func serveAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q", c.Args().First())
	}
	host := c.String("host")
	if !isLoopback(host) && c.String("api-key") == "" {
		return cliutil.Usagef("--host %s exposes the server beyond this machine; give --api-key KEY (or NVMAI_API_KEY) so that only clients with the key can use it", host)
	}
	cfg, hopt, err := serveOptions(c)
	if err != nil {
		return err
	}
	if cfg.Defaults, err = serveDefaults(c); err != nil {
		return err
	}
	several := c.IsSet("models-dir")
	if err := checkModelsFlags(c); err != nil {
		return err
	}
	if err := checkServeRouting(c); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(c.Int("port"))))
	if err != nil {
		return err
	}
	srv := server.New(cfg)
	oh := httpapi.New(srv, hopt)
	openai.New(srv, openai.Options{}).Mount(oh)
	anthropic.New(srv, anthropic.Options{}).Mount(oh)
	responses.New(srv, responses.Options{Keep: responsesKeep(c.Int("responses-keep"))}).Mount(oh)
	if !c.Bool("no-webui") {
		webui.Mount(oh)
	}
	hs := httpapi.NewHTTPServer(oh)
	errc := make(chan error, 1)
	limited := httpapi.LimitConnections(hs, ln, c.Int("max-connections"))
	go func() { errc <- hs.Serve(limited) }()
	if scriptedEngine != nil && c.String("scripted") != "" {
		e, r, err := scriptedEngine(c)
		if err != nil {
			hs.Close()
			return err
		}
		srv.SetEngine(e, r)
		fmt.Fprintf(os.Stderr, "nvmai-run serve: ready at http://%s/v1 | scripted engine %s (a test build)\n", ln.Addr(), c.String("scripted"))
		return serveUntilDone(c, hs, oh, errc)
	}
	if several {
		disk, err := openPromptDisk(c, "") // --models-dir hashes each install when it loads it
		if err != nil {
			hs.Close()
			return err
		}
		set, err := openModelsDir(c, srv, ln.Addr(), disk)
		if err != nil {
			disk.Close()
			hs.Close()
			return err
		}
		defer func() {
			disk.Close() // finishes the queued writes, then the models go
			set.Close()
		}()
		return serveUntilDone(c, hs, oh, errc)
	}
	// Listen first so /health answers 503 while the model loads.
	e, renderer, err := loadServeEngine(c)
	if err != nil {
		hs.Close()
		return err
	}
	defer e.Close()
	parallel, parallelNote, foot, err := serveParallel(c, e)
	if err != nil {
		hs.Close()
		return err
	}
	footprints.Delete(e) // serve prints the footprint with its parallel states instead
	fmt.Fprintln(c.App.ErrWriter, "nvmai-run serve: "+foot.String())
	routes, routesLine, err := serveRouting(c, e, parallel)
	if err != nil {
		hs.Close()
		return err
	}
	if routesLine != "" {
		fmt.Fprintln(c.App.ErrWriter, "nvmai-run serve: "+routesLine)
	}
	cacheBytes, _ := expertcache.ParseSize(c.String("prompt-cache"))
	disk, err := openPromptDisk(c, c.String("model"))
	if err != nil {
		hs.Close()
		return err
	}
	defer disk.Close() // finishes the queued writes
	re := server.NewRuntimeEngine(e, server.RuntimeOptions{
		ModelID: modelID(c), Budget: c.String("ram-budget"), KVInitial: c.Int("kv-initial"), KVBits: kvBits(c), MaxContext: c.Int("max-context"), CacheBytes: cacheBytes,
		Disk: disk, TemplateSHA256: server.TemplateSHA256(renderer), SnapshotGap: snapshotGap(c), Parallel: parallel, Routing: routes,
	})
	defer re.Close()
	srv.SetEngine(re, renderer)
	info := re.Info()
	if parallelNote != "" {
		parallelNote = " (" + parallelNote + ")"
	}
	fmt.Fprintf(c.App.ErrWriter, "nvmai-run serve: ready at http://%s/v1 | model %s | context %d tokens | %s | prompt cache %s | parallel %d%s\n",
		ln.Addr(), info.ID, info.Context, engineLine(e), expertcache.FormatSize(cacheBytes), re.Parallel(), parallelNote)
	return serveUntilDone(c, hs, oh, errc)
}

// Test builds (-tags nvmai_scripted) set these in serve_scripted.go: the
// --scripted flag and the engine that replaces the model.
var (
	scriptedFlags  []cli.Flag
	scriptedEngine func(c *cli.Context) (server.Engine, server.Renderer, error)
)

// serveUntilDone serves until the listener fails or a signal asks to stop,
// then cuts off the requests in flight (a stream blocked on its client
// included) and closes the connections.
func serveUntilDone(c *cli.Context, hs *http.Server, oh *httpapi.Host, errc chan error) error {
	sig, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-sig.Done():
		n := oh.CutOff()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		msg := "stopped"
		if n > 0 {
			msg = fmt.Sprintf("stopped; %s in flight %s cut off", plural(n, "request"), map[bool]string{true: "was", false: "were"}[n == 1])
		}
		if err := hs.Shutdown(ctx); err != nil {
			hs.Close() // a non-stream answer still blocked on its client
			msg += "; connections still busy after 5 s were closed"
		}
		fmt.Fprintln(os.Stderr, "nvmai-run serve: "+msg)
		return nil
	}
}

func serveOptions(c *cli.Context) (server.Config, httpapi.Options, error) {
	cfg := server.Config{QueueLimit: c.Int("queue-limit"), StrictMaxTokens: c.Bool("strict-max-tokens"), NoToolConstraint: c.Bool("no-constrain-tools"), Notice: func(line string) { fmt.Fprintln(os.Stderr, "nvmai-run serve: "+line) }}
	if c.Bool("log-json") {
		cfg.Log = server.JSONLogger(os.Stderr)
	}
	switch c.String("thinking") {
	case "":
	case "on", "off":
		on := c.String("thinking") == "on"
		cfg.Thinking = &on
	default:
		return cfg, httpapi.Options{}, cliutil.Usagef("--thinking %q: expected on or off", c.String("thinking"))
	}
	if c.Int("queue-limit") < 0 {
		return cfg, httpapi.Options{}, cliutil.Usagef("--queue-limit must be ≥ 0")
	}
	if _, err := expertcache.ParseSize(c.String("prompt-cache")); err != nil && c.String("prompt-cache") != "0" {
		return cfg, httpapi.Options{}, cliutil.Usagef("--prompt-cache: %v", err)
	}
	if b, err := expertcache.ParseSize(c.String("prompt-cache-disk-budget")); err != nil || b <= 0 {
		return cfg, httpapi.Options{}, cliutil.Usagef("--prompt-cache-disk-budget %q: give a size such as 20G", c.String("prompt-cache-disk-budget"))
	}
	maxBody, err := expertcache.ParseSize(c.String("max-body"))
	if err != nil {
		return cfg, httpapi.Options{}, cliutil.Usagef("--max-body: %v", err)
	}
	if c.Duration("stream-write-timeout") <= 0 {
		return cfg, httpapi.Options{}, cliutil.Usagef("--stream-write-timeout %s: give a positive duration such as 20s", c.Duration("stream-write-timeout"))
	}
	if c.Int("max-connections") < 1 {
		return cfg, httpapi.Options{}, cliutil.Usagef("--max-connections must be ≥ 1")
	}
	return cfg, httpapi.Options{APIKey: c.String("api-key"), CORSOrigin: c.String("cors-origin"), MaxBody: maxBody,
		StreamWriteTimeout: c.Duration("stream-write-timeout"), ListenHost: c.String("host"), AllowedHosts: c.StringSlice("allowed-host")}, nil
}

// loadServeEngine loads the model and its chat template. Until the Jinja
// engine renders, an install whose template is the plain ChatML one is
// served by the built-in ChatML renderer.
func loadServeEngine(c *cli.Context) (*runtime.Engine, server.Renderer, error) {
	e, err := loadEngine(c)
	if err != nil {
		return nil, nil, err
	}
	var tmpl *chattemplate.Template
	if p := c.String("chat-template"); p != "" {
		raw, rerr := os.ReadFile(p)
		if rerr != nil {
			e.Close()
			return nil, nil, rerr
		}
		tmpl, err = chattemplate.Parse(string(raw))
	} else {
		tmpl, err = chattemplate.Load(c.String("model"))
	}
	r, err := server.CheckedRenderer(e, tmpl, err)
	if err != nil {
		e.Close()
		return nil, nil, err
	}
	if t, ok := r.(*chattemplate.Template); ok {
		fmt.Fprintf(os.Stderr, "nvmai-run serve: chat template sha256 %s\n", t.SHA256())
	}
	return e, r, nil
}

// checkModelsFlags refuses what --models-dir cannot mean: one model's
// flags, and --idle-unload without it.
func checkModelsFlags(c *cli.Context) error {
	if err := cliutil.Exclusive(c, "model", "models-dir"); err != nil {
		return err
	}
	if !c.IsSet("models-dir") {
		if c.IsSet("idle-unload") {
			return cliutil.Usagef("--idle-unload needs --models-dir (with --model the one model stays loaded; a --models-dir holding one install unloads it when idle)")
		}
		return nil
	}
	for _, f := range []string{"model-id", "chat-template"} {
		if c.IsSet(f) {
			return cliutil.Usagef("--%s names one model's id or template; with --models-dir each install uses its path under DIR and its own template", f)
		}
	}
	if c.Int("parallel") > 1 {
		return cliutil.Usagef("--parallel %d applies to --model; --models-dir runs one generation at a time (switching models waits for none)", c.Int("parallel"))
	}
	if c.String("rope-scaling") != "none" {
		return cliutil.Usagef("--rope-scaling applies to one model; with --models-dir each install uses the RoPE scaling of its config.json")
	}
	if c.IsSet("idle-unload") && c.Duration("idle-unload") <= 0 {
		return cliutil.Usagef("--idle-unload %s: give a positive duration such as 10m", c.Duration("idle-unload"))
	}
	return nil
}

// openModelsDir lists the installs under --models-dir and hands them to
// srv, which loads them on demand.
func openModelsDir(c *cli.Context, srv *server.Server, addr net.Addr, disk *promptcache.Disk) (*modeldir.Set, error) {
	lopt, err := loadOptions(c, "")
	if err != nil {
		return nil, err
	}
	cacheBytes, _ := expertcache.ParseSize(c.String("prompt-cache"))
	notice := func(line string) { fmt.Fprintln(os.Stderr, "nvmai-run serve: "+line) }
	set, err := modeldir.Open(modeldir.Options{
		Dir: c.String("models-dir"), Load: lopt, MaxContext: c.Int("max-context"), Notice: notice,
		Runtime: server.RuntimeOptions{Budget: c.String("ram-budget"), KVInitial: c.Int("kv-initial"), KVBits: kvBits(c), CacheBytes: cacheBytes, Disk: disk, SnapshotGap: snapshotGap(c)},
	})
	if err != nil {
		return nil, err
	}
	if err := srv.SetModels(set, c.Duration("idle-unload")); err != nil {
		set.Close()
		return nil, err
	}
	ids := make([]string, 0, len(set.List()))
	for _, m := range set.List() {
		ids = append(ids, m.ID)
	}
	idle := "never"
	if d := c.Duration("idle-unload"); d > 0 {
		idle = d.String()
	}
	fmt.Fprintf(os.Stderr, "nvmai-run serve: ready at http://%s/v1 | %d models, loaded on demand, one at a time: %s | idle unload %s | prompt cache %s\n",
		addr, len(ids), strings.Join(ids, ", "), idle, expertcache.FormatSize(cacheBytes))
	return set, nil
}

// engineLine names where the model runs for the ready line: the expert
// budget on the CPU, the device on the GPU (which holds every expert).
func engineLine(e *runtime.Engine) string {
	if e.Info().Device == nvmodel.CPU {
		return "expert budget " + expertcache.FormatSize(e.ExpertStats().BudgetBytes)
	}
	return "engine " + e.Info().Name
}

// gpuSnapshotGap is the fewest tokens between two prompt-cache snapshots
// of one request on the GPU. There a snapshot copies the whole sequence
// state to host memory (for the 35B-A3B at 4,000 tokens, 60 MiB of Gated
// DeltaNet state and 160 MiB of float32 KV rows: tens of milliseconds),
// while a prefill pass feeds 64 tokens in about as long; so a snapshot
// that would save re-feeding fewer tokens than this costs more than it
// saves, and delays the first token besides. The CPU prefills a hundred
// times slower and keeps every snapshot point.
const gpuSnapshotGap = 64

// snapshotGap is server.RuntimeOptions.SnapshotGap for --engine.
func snapshotGap(c *cli.Context) int {
	if engineDevice(c) == nvmodel.CPU {
		return 0
	}
	return gpuSnapshotGap
}

// responsesKeep maps the flag (0 = none) onto responses.Options.Keep.
func responsesKeep(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// openPromptDisk opens --prompt-cache-dir (nil when not given). With
// install (serve --model) it then hashes the install against its receipt
// and refuses a damaged one, whose snapshots would otherwise resume the
// intact install's (#44 D12).
func openPromptDisk(c *cli.Context, install string) (*promptcache.Disk, error) {
	dir := c.String("prompt-cache-dir")
	if dir == "" {
		return nil, nil
	}
	budget, _ := expertcache.ParseSize(c.String("prompt-cache-disk-budget"))
	d, err := promptcache.OpenDisk(promptcache.DiskOptions{Dir: dir, Budget: budget, Queue: 4, Log: func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "nvmai-run serve: "+f+"\n", a...)
	}})
	if err != nil {
		return nil, err
	}
	if install != "" {
		if err := server.VerifyInstall(c.Context, install, func(line string) { fmt.Fprintln(os.Stderr, "nvmai-run serve: "+line) }); err != nil {
			d.Close()
			return nil, err
		}
	}
	st := d.Stats()
	fmt.Fprintf(os.Stderr, "nvmai-run serve: prompt cache dir %s: %d entries, %s of %s\n", dir, st.Entries, expertcache.FormatSize(st.Bytes), expertcache.FormatSize(budget))
	return d, nil
}

func modelID(c *cli.Context) string {
	if id := c.String("model-id"); id != "" {
		return id
	}
	return filepath.Base(filepath.Clean(c.String("model")))
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// defaultParallelMost is the most generations serve runs at once when
// --parallel is not given: llama-server's default slot count, enough for an
// agent's side requests beside its main turn without states that mostly sit
// idle.
const defaultParallelMost = 4

// machineMemory is the machine's RAM (a test stands in a smaller machine).
var machineMemory = expertcache.MemTotal

// serveParallel is how many generations serve runs at once, with the ready
// line's note on how a default was chosen, and the footprint counting that
// many sequence states. A given --parallel the engine cannot batch is
// refused, as is one whose states do not fit the machine beside the rest of
// the footprint (unless --force): each generation in flight holds its own
// KV cache and recurrent state, sized for --max-context. Without
// --parallel, 1 where batching is refused and otherwise defaultParallel.
func serveParallel(c *cli.Context, e *runtime.Engine) (int, string, runtime.Footprint, error) {
	f, err := runtime.ComputeFootprint(e.Install, runtime.FootprintOptions{
		Experts: runtime.ExpertOptions{Budget: e.ExpertStats().BudgetBytes, Slots: c.Int("expert-cache-slots")}, Device: engineDevice(c), KVBits: kvBits(c),
		MaxContext: c.Int("max-context"), RopeScaling: c.String("rope-scaling"), Threads: c.Int("threads"),
	})
	if err != nil {
		return 0, "", f, cliutil.Usagef("%v", err)
	}
	total, _ := machineMemory()
	if !c.IsSet("parallel") {
		if d := engineDevice(c); d != nvmodel.CPU { // the states live in device memory
			n, note := defaultDeviceParallel(e, d)
			return n, note, f.WithSequences(n), nil
		}
		if !e.CanBatch() {
			return 1, fmt.Sprintf("default: the %s model's engine has no batched step yet", e.Install.Manifest.Architecture), f, nil
		}
		n, note := defaultParallel(f, total)
		return n, note, f.WithSequences(n), nil
	}
	n := c.Int("parallel")
	if n <= 1 {
		return n, "", f, nil
	}
	if !e.CanBatch() {
		return 0, "", f, cliutil.Usagef("--parallel %d: the %s model's %s engine has no batched decode step yet (the qwen35 CPU and GPU engines have one); drop --parallel", n, e.Install.Manifest.Architecture, e.Info().Device)
	}
	if !c.Bool("force") {
		if err := parallelFits(n, f, total); err != nil {
			return 0, "", f, err
		}
		if err := deviceParallelFits(e, n); err != nil {
			return 0, "", f, err
		}
	}
	return n, "", f.WithSequences(n), nil
}

// statesRoom is the memory left for sequence states: memTotal less the
// margin and less the footprint f of one state without that state (the
// resident weights, the expert cache's budget, scratch). Never negative.
func statesRoom(f runtime.Footprint, memTotal int64) int64 {
	return max(0, memTotal-runtime.FootprintMargin(memTotal)-(f.Total-f.SequenceState()))
}

// defaultParallel is serve's --parallel when none is given: the most
// sequence states, up to defaultParallelMost, that fit statesRoom, and at
// least 1; with the ready line's note saying so. memTotal ≤ 0 (unknown)
// gives 1.
func defaultParallel(f runtime.Footprint, memTotal int64) (int, string) {
	if memTotal <= 0 {
		return 1, "default: this machine's memory is unknown; --parallel N runs N at once"
	}
	per, room := f.SequenceState(), statesRoom(f, memTotal)
	n := defaultParallelMost
	if per > 0 {
		n = int(min(int64(defaultParallelMost), room/per))
	}
	if n < 1 {
		return 1, fmt.Sprintf("default: one state of %s, %s free beside the rest", expertcache.FormatSize(per), expertcache.FormatSize(room))
	}
	note := fmt.Sprintf("default: %s of %s %s in %s free", plural(n, "state"), expertcache.FormatSize(per), map[bool]string{true: "fits", false: "fit"}[n == 1], expertcache.FormatSize(room))
	if n < defaultParallelMost {
		note += fmt.Sprintf("; %d need %s: lower --max-context%s for more", defaultParallelMost, expertcache.FormatSize(int64(defaultParallelMost)*per), kvBitsHint(f))
	}
	return n, note
}

// kvBitsHint suggests --kv-bits 8 where the KV cache is wider.
func kvBitsHint(f runtime.Footprint) string {
	if f.KVBits > 8 {
		return " or give --kv-bits 8"
	}
	return ""
}

// parallelFits refuses n sequence states that, beside the footprint f of
// one, exceed memTotal less the margin (memTotal ≤ 0, unknown, passes).
func parallelFits(n int, f runtime.Footprint, memTotal int64) error {
	all := f.WithSequences(n)
	if memTotal <= 0 || all.Total <= memTotal-runtime.FootprintMargin(memTotal) {
		return nil
	}
	per, room := f.SequenceState(), statesRoom(f, memTotal)
	fit := "not even one fits"
	if per > 0 && room >= per {
		fit = fmt.Sprintf("%d fit", room/per)
	}
	return cliutil.Usagef("--parallel %d holds %d sequence states of %s each (KV %s at %d tokens, +%s while growing, recurrent %s): %s in all, more than this machine's %s less a %s margin; %s in the %s left beside the rest of the footprint. Lower --parallel or --max-context%s, or pass --force",
		n, n, expertcache.FormatSize(per), expertcache.FormatSize(f.KV), f.MaxContext, expertcache.FormatSize(f.KVGrowth), expertcache.FormatSize(f.Recurrent),
		expertcache.FormatSize(all.Total), expertcache.FormatSize(memTotal), expertcache.FormatSize(runtime.FootprintMargin(memTotal)), fit, expertcache.FormatSize(room), kvBitsHint(f))
}
