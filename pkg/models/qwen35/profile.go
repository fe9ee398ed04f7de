package qwen35

import "github.com/nvmai/nvmai/pkg/model"

// SetStepProfile makes the state's decode steps add to p (nil stops it).
func (s *State) SetStepProfile(p *model.StepProfile) { s.profile = p }
