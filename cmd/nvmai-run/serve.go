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
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/anthropic"
	"github.com/nvmai/nvmai/pkg/server/openai"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "serve the model over an OpenAI-compatible HTTP API",
		UsageText: "nvmai-run serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY]",
		Description: `Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, POST /apply-template,
GET /health. One generation runs at a time; others wait in FIFO order (--queue-limit). Binds
127.0.0.1 unless --host says otherwise, which then requires --api-key.`,
		Flags: append(modelFlags(),
			&cli.StringFlag{Name: "host", Value: "127.0.0.1", Usage: "address to listen on; anything but loopback needs --api-key"},
			&cli.IntFlag{Name: "port", Value: 8080, Usage: "TCP port"},
			&cli.StringFlag{Name: "api-key", Usage: "require this key (Authorization: Bearer KEY or x-api-key: KEY)", EnvVars: []string{"NVMAI_API_KEY"}},
			&cli.StringFlag{Name: "cors-origin", Usage: "allow browser requests from this origin (\"*\" for any); default none"},
			&cli.StringFlag{Name: "model-id", Usage: "model id reported by /v1/models", DefaultText: "the install directory's name"},
			&cli.IntFlag{Name: "queue-limit", Value: 4, Usage: "requests that may wait behind the running one; more get 429"},
			&cli.StringFlag{Name: "prompt-cache", Value: "512M", Usage: "RAM for model-state snapshots reused across turns (0 = off)"},
			&cli.StringFlag{Name: "max-body", Value: "4M", Usage: "largest request body"},
			&cli.StringFlag{Name: "thinking", Usage: "default for enable_thinking when a request does not say: on or off", DefaultText: "the template's default"},
			&cli.StringFlag{Name: "chat-template", Usage: "Jinja chat template `FILE` to use instead of the install's"},
			&cli.IntFlag{Name: "max-connections", Value: 64, Usage: "most open client connections"},
			&cli.BoolFlag{Name: "log-json", Usage: "log one JSON object per request instead of a text line"},
		),
		Action: serveAction,
	}
}

func serveAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q", c.Args().First())
	}
	if c.String("engine") == "gpu" {
		return cliutil.Usagef("serve runs on --engine cpu for now: the GPU engine keeps no prompt-cache snapshots yet")
	}
	host := c.String("host")
	if !isLoopback(host) && c.String("api-key") == "" {
		return cliutil.Usagef("--host %s exposes the server beyond this machine; give --api-key KEY (or NVMAI_API_KEY) so that only clients with the key can use it", host)
	}
	cfg, hopt, err := serveOptions(c)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(c.Int("port"))))
	if err != nil {
		return err
	}
	srv := server.New(cfg)
	h := openai.New(srv, hopt)
	anthropic.Mount(h, srv, anthropic.Options{KeepAlive: hopt.KeepAlive})
	hs := openai.NewHTTPServer(h)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(openai.LimitListener(ln, c.Int("max-connections"))) }()
	// Listen first so /health answers 503 while the model loads.
	e, renderer, err := loadServeEngine(c)
	if err != nil {
		hs.Close()
		return err
	}
	defer e.Close()
	cacheBytes, _ := expertcache.ParseSize(c.String("prompt-cache"))
	re := server.NewRuntimeEngine(e, server.RuntimeOptions{
		ModelID: modelID(c), Budget: c.String("ram-budget"), KVInitial: c.Int("kv-initial"), KVBits: kvBits(c), MaxContext: c.Int("max-context"), CacheBytes: cacheBytes,
	})
	srv.SetEngine(re, renderer)
	info := re.Info()
	budget := expertcache.FormatSize(e.ExpertStats().BudgetBytes)
	fmt.Fprintf(os.Stderr, "nvmai-run serve: ready at http://%s/v1 | model %s | context %d tokens | expert budget %s | prompt cache %s\n",
		ln.Addr(), info.ID, info.Context, budget, expertcache.FormatSize(cacheBytes))
	sig, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-sig.Done():
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return hs.Shutdown(ctx)
	}
}

func serveOptions(c *cli.Context) (server.Config, openai.Options, error) {
	cfg := server.Config{QueueLimit: c.Int("queue-limit")}
	if c.Bool("log-json") {
		cfg.Log = server.JSONLogger(os.Stderr)
	}
	switch c.String("thinking") {
	case "":
	case "on", "off":
		on := c.String("thinking") == "on"
		cfg.Thinking = &on
	default:
		return cfg, openai.Options{}, cliutil.Usagef("--thinking %q: expected on or off", c.String("thinking"))
	}
	if c.Int("queue-limit") < 0 {
		return cfg, openai.Options{}, cliutil.Usagef("--queue-limit must be ≥ 0")
	}
	if _, err := expertcache.ParseSize(c.String("prompt-cache")); err != nil && c.String("prompt-cache") != "0" {
		return cfg, openai.Options{}, cliutil.Usagef("--prompt-cache: %v", err)
	}
	maxBody, err := expertcache.ParseSize(c.String("max-body"))
	if err != nil {
		return cfg, openai.Options{}, cliutil.Usagef("--max-body: %v", err)
	}
	return cfg, openai.Options{APIKey: c.String("api-key"), CORSOrigin: c.String("cors-origin"), MaxBody: maxBody}, nil
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
	if err == nil {
		if _, rerr := tmpl.Render(chattemplate.Input{Messages: []chattemplate.Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true}); rerr == nil {
			fmt.Fprintf(os.Stderr, "nvmai-run serve: chat template sha256 %s\n", tmpl.SHA256())
			return e, tmpl, nil
		} else {
			err = rerr
		}
	}
	if e.Tokenizer.UsesPlainChatTemplate() {
		return e, server.PlainChatML{}, nil
	}
	e.Close()
	return nil, nil, fmt.Errorf("the chat template cannot be used (%v); give one with --chat-template FILE", err)
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
