package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/limits"
)

func templateCommand() *cli.Command {
	return &cli.Command{
		Name:      "template",
		Usage:     "print the prompt the model's chat template makes of a conversation",
		UsageText: "nvmai-run template --model DIR --messages FILE [--tools FILE] [--kwargs JSON] [--no-generation-prompt] [--chat-template FILE]",
		Description: `Renders an OpenAI-style messages array with the install's chat template (chat_template.jinja,
else tokenizer_config.json's chat_template) exactly as transformers' apply_chat_template would, and
prints the prompt to stdout with nothing added. --messages is a JSON array of messages, or a whole
chat-completions request body (its tools and chat_template_kwargs are used unless --tools/--kwargs
are given). Tool-call arguments sent as JSON strings are decoded first. The template's sha256 and
origin go to stderr, and what nvmai found the template to do when it has a reasoning effort or
keeps earlier reasoning by default (the Qwen3.8 family).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "install or snapshot `DIR`"},
			&cli.StringFlag{Name: "messages", Usage: "`FILE` with the messages JSON array (or a request body)"},
			&cli.StringFlag{Name: "tools", Usage: "`FILE` with the tools JSON array"},
			&cli.StringFlag{Name: "kwargs", Usage: `template variables as a JSON object, e.g. '{"enable_thinking": false}'`},
			&cli.BoolFlag{Name: "no-generation-prompt", Usage: "do not end with the assistant's generation prompt"},
			&cli.StringFlag{Name: "chat-template", Usage: "render with the template in `FILE` instead of the install's"},
		},
		Action: templateAction,
	}
}

func templateAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q", c.Args().First())
	}
	dir, msgPath := c.String("model"), c.String("messages")
	if dir == "" && c.String("chat-template") == "" {
		return cliutil.Usagef("--model DIR (or --chat-template FILE) is required")
	}
	if msgPath == "" {
		return cliutil.Usagef("--messages FILE is required")
	}
	tmpl, err := loadTemplate(dir, c.String("chat-template"))
	if err != nil {
		return err
	}
	in, err := templateInput(msgPath, c.String("tools"), c.String("kwargs"))
	if err != nil {
		return err
	}
	in.AddGenerationPrompt = !c.Bool("no-generation-prompt")
	prompt, err := tmpl.Render(in)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "template %s sha256 %s\n", tmpl.Origin(), tmpl.SHA256())
	if f := tmpl.Features(); len(f.ReasoningEfforts) > 0 || f.PreservesThinking {
		// What chat and serve key on (the Qwen3.8 family), so a user can
		// see why an install is treated as one.
		fmt.Fprintf(os.Stderr, "template features: reasoning_effort %s (default %s); earlier reasoning rendered by default %v\n",
			strings.Join(f.ReasoningEfforts, ", "), cmp.Or(f.DefaultEffort, "none"), f.PreservesThinking)
	}
	_, err = os.Stdout.WriteString(prompt)
	return err
}

func loadTemplate(dir, override string) (*chattemplate.Template, error) {
	if override != "" {
		return chattemplate.LoadFile(override, dir)
	}
	return chattemplate.Load(dir)
}

// requestFile is the part of a chat-completions body the template needs.
type requestFile struct {
	Messages json.RawMessage            `json:"messages"`
	Tools    []json.RawMessage          `json:"tools"`
	Kwargs   map[string]json.RawMessage `json:"chat_template_kwargs"`
}

func templateInput(msgPath, toolsPath, kwargs string) (chattemplate.Input, error) {
	var in chattemplate.Input
	data, err := limits.ReadFile(msgPath, limits.SnapshotJSON)
	if err != nil {
		return in, err
	}
	var req requestFile
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		if err := json.Unmarshal(trimmed, &req); err != nil {
			return in, fmt.Errorf("%s: %w", msgPath, err)
		}
	} else {
		req.Messages = data
	}
	if in.Messages, err = chattemplate.FromOpenAIMessages(req.Messages); err != nil {
		return in, fmt.Errorf("%s: %w", msgPath, err)
	}
	in.Tools = req.Tools
	if toolsPath != "" {
		if in.Tools, err = readTools(toolsPath); err != nil {
			return in, err
		}
	}
	if kwargs != "" {
		req.Kwargs = nil
		if err := json.Unmarshal([]byte(kwargs), &req.Kwargs); err != nil {
			return in, cliutil.Usagef("--kwargs must be a JSON object: %v", err)
		}
	}
	if req.Kwargs != nil {
		in.Kwargs = map[string]any{}
		for k, v := range req.Kwargs {
			in.Kwargs[k] = v
		}
	}
	return in, nil
}

func readTools(path string) ([]json.RawMessage, error) {
	data, err := limits.ReadFile(path, limits.SnapshotJSON)
	if err != nil {
		return nil, err
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(data, &tools); err != nil || tools == nil {
		return nil, fmt.Errorf("%s: must be a JSON array of tool objects", path)
	}
	return tools, nil
}
