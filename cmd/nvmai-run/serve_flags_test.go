package main

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
	"github.com/nvmai/nvmai/pkg/server"
)

// serveApplied lists the serve flags that take effect, with where; every
// other flag serve shows must be refused (#44 S17). A new serve flag
// belongs in one list or the other.
var serveApplied = map[string]string{
	// engine and session flags: loadEngine / loadOptions, RuntimeOptions
	"model": "", "engine": "", "threads": "", "ram-budget": "", "vram-budget": "", "expert-cache-slots": "", "io-threads": "",
	"prefetch": "", "warm-reads": "", "kv-bits": "", "rope-scaling": "", "force": "", "kv-initial": "", "max-context": "",
	// sampling flags: serveDefaults → server.Config.Defaults
	"max-tokens": "", "temperature": "", "top-k": "", "top-p": "", "seed": "",
	// serve's own: serveOptions, serveAction, openPromptDisk, openModelsDir
	"host": "", "port": "", "api-key": "", "cors-origin": "", "model-id": "", "queue-limit": "", "prompt-cache": "",
	"prompt-cache-dir": "", "prompt-cache-disk-budget": "", "max-body": "", "thinking": "", "chat-template": "",
	"max-connections": "", "stream-write-timeout": "", "allowed-host": "", "log-json": "", "responses-keep": "",
	"models-dir": "", "idle-unload": "", "strict-max-tokens": "", "parallel": "", "no-constrain-tools": "",
	"no-webui": "", // serveAction: webui.Mount
	"scripted": "", // test builds only: the scripted engine
}

func TestServeFlagsAreAppliedOrRefused(t *testing.T) {
	dir := t.TempDir()
	for _, f := range serveCommand().Flags {
		name := f.Names()[0]
		if _, ok := serveApplied[name]; ok {
			continue
		}
		if _, ok := serveRefusedFlags[name]; !ok {
			t.Errorf("serve shows --%s, which is neither applied (serveApplied) nor refused (serveRefusedFlags)", name)
			continue
		}
		args := []string{"serve", "--model", dir, "--port", "0", "--" + name}
		if _, isBool := f.(*cli.BoolFlag); !isBool {
			args = append(args, "x")
		}
		r := clitest.Run(t, app(), args...)
		if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, "serve does not take --"+name+": ") {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 refusing --%s", args, r.Code, r.Stderr, name)
		}
	}
}

// runServeDefaults runs serve's flag parsing with args and returns what
// serveDefaults makes of them.
func runServeDefaults(t *testing.T, args ...string) (server.Defaults, error) {
	t.Helper()
	cmd := serveCommand()
	var d server.Defaults
	var derr error
	cmd.Action = func(c *cli.Context) error {
		d, derr = serveDefaults(c)
		return nil
	}
	a := &cli.App{Name: "nvmai-run", Commands: []*cli.Command{cmd}}
	if err := a.Run(append([]string{"nvmai-run", "serve"}, args...)); err != nil {
		t.Fatal(err)
	}
	return d, derr
}

func TestServeSamplingFlagsBecomeServerDefaults(t *testing.T) {
	d, err := runServeDefaults(t, "-n", "3", "--temperature", "0", "--top-k", "7", "--top-p", "0.5", "--seed", "5")
	if err != nil {
		t.Fatal(err)
	}
	if d.MaxTokens != 3 || d.Temperature == nil || *d.Temperature != 0 || d.TopK == nil || *d.TopK != 7 ||
		d.TopP == nil || *d.TopP != 0.5 || d.Seed == nil || *d.Seed != 5 {
		t.Fatalf("defaults %+v", d)
	}
	if d, err := runServeDefaults(t); err != nil || d != (server.Defaults{}) {
		t.Fatalf("no flags: %+v, %v; want no defaults (the flags' own defaults are for runs)", d, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--seed", "0"}, "--seed 0: give serve a seed of at least 1"},
		{[]string{"--top-k", "-3"}, "--top-k -3 must be ≥ 0"},
		{[]string{"--temperature", "-1"}, "--temperature -1 must be"},
		{[]string{"--top-p", "2"}, "--top-p 2 must be in [0, 1]"},
	} {
		_, err := runServeDefaults(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || cliutil.ExitCode(err) != cliutil.ExitUsage {
			t.Errorf("%q: %v; want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}
