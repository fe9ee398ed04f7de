//go:build nvmai_scripted

package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/scripted"
)

// In a test build, serve --scripted FILE answers with the scripted engine
// (pkg/server/scripted) instead of loading a model: --model names any
// directory with tokenizer.json and tokenizer_config.json (an install or a
// snapshot), --chat-template the template when that directory's cannot
// render tools.
func init() {
	scriptedFlags = []cli.Flag{&cli.StringFlag{Name: "scripted", Usage: "test build only: answer with the scripted engine driven by this JSON `FILE` instead of a model"}}
	scriptedEngine = func(c *cli.Context) (server.Engine, server.Renderer, error) {
		dir := c.String("model")
		if dir == "" {
			return nil, nil, cliutil.Usagef("--scripted needs --model DIR for the tokenizer (an install, or a snapshot such as testdata/tiny-moe-fused)")
		}
		e, err := scripted.Load(c.String("scripted"), dir, os.Stderr)
		if err != nil {
			return nil, nil, err
		}
		var tmpl *chattemplate.Template
		if p := c.String("chat-template"); p != "" {
			tmpl, err = chattemplate.LoadFile(p, dir)
		} else {
			tmpl, err = chattemplate.Load(dir)
		}
		if err != nil {
			return nil, nil, err
		}
		return e, tmpl, nil
	}
}
