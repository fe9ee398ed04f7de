package runtime

// The CPU architectures register themselves with package model when
// imported; every program that loads an install through this package can
// run them. Device engines (pkg/gpu) are imported by the program
// that offers them.
import _ "github.com/nvmai/nvmai/pkg/models/qwen35"
