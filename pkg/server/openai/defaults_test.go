package openai

import "github.com/nvmai/nvmai/pkg/sample"

var samplingDefaults = sample.Params{Temperature: 0.7, TopP: 0.95, TopK: 20}
