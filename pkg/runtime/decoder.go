package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// Decoder generates one sequence a token at a time, leaving the feeding of
// each picked token to its caller: Session.Generate feeds it at once
// (Feed), a server running several sequences feeds many in one batched
// step (Engine.StepBatch). Both go through the same Next, so a sequence's
// sampling (sampler state, constraint, stop ids, streamed text,
// StopAfter) is the same code whichever way its tokens are fed, and its
// output is bitwise the same as long as the step is (model.BatchStepper's
// contract).
type Decoder struct {
	s       *Session
	sampler *sample.Sampler
	opt     GenerateOptions
	res     *Result
	stream  *tokenizer.StreamDecoder
	text    []byte
	start   time.Time
	steps   int
	// unfed is the token Next handed out to be fed (-1: none); Next
	// refuses to pick another before it is.
	unfed int
	done  bool
}

// NewDecoder starts generating after what the session holds (its prompt
// fed by Prefill): the checks and sampler of Generate, without feeding a
// prompt. The result comes from Result once Next reports the end.
func (s *Session) NewDecoder(opt GenerateOptions) (*Decoder, error) {
	if s.err != nil {
		return nil, s.err
	}
	if len(s.pending) > 0 {
		return nil, fmt.Errorf("runtime: the session holds an unfed token; Prefill the prompt before decoding")
	}
	if s.Len() == 0 {
		return nil, fmt.Errorf("empty prompt")
	}
	sampler, err := sample.New(opt.Sampling)
	if err != nil {
		return nil, err
	}
	return s.newDecoder(sampler, opt, &Result{IDs: []int{}}), nil
}

func (s *Session) newDecoder(sampler *sample.Sampler, opt GenerateOptions, res *Result) *Decoder {
	res.StopReason = "max_tokens"
	return &Decoder{s: s, sampler: sampler, opt: opt, res: res, unfed: -1,
		stream: s.e.Tokenizer.NewStreamDecoder(tokenizer.DecodeOptions{}), start: time.Now()}
}

// Session is the session the decoder generates in.
func (d *Decoder) Session() *Session { return d.s }

// Result is the generation so far; complete once Next reported the end.
func (d *Decoder) Result() *Result { return d.res }

// Next picks the next token from the logits of the last token fed,
// emits it (OnToken, StopAfter) and reports whether generation goes on:
// feed true asks the caller to feed id (Feed or StepBatch) before the
// next call; feed false is the end, the session then holding the last
// token as pending, as after Generate. An error leaves the session at a
// position the caller cannot name (reset or restore it).
func (d *Decoder) Next(ctx context.Context) (id int, feed bool, err error) {
	if d.done {
		return 0, false, nil
	}
	if d.unfed >= 0 {
		return 0, false, errors.New("runtime: Decoder.Next before the last token was fed")
	}
	s, opt, res := d.s, d.opt, d.res
	if len(res.IDs) >= opt.MaxTokens {
		return 0, false, d.finish()
	}
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	id, err = s.next(d.sampler, opt)
	if err != nil {
		return 0, false, err
	}
	ended, err := advance(opt.Constraint, id)
	if err != nil {
		return 0, false, err
	}
	res.IDs = append(res.IDs, id)
	if ended || !opt.IgnoreEOS && slices.Contains(opt.StopIDs, id) {
		// The stop token ends the text; its id is kept, its text is not shown.
		s.pending, res.StopReason = []int{id}, "eos"
		return 0, false, d.finish()
	}
	piece := d.stream.Push(id)
	d.emit(id, piece)
	if opt.StopAfter != nil && opt.StopAfter(id, piece) {
		s.pending, res.StopReason = []int{id}, "callback"
		return 0, false, d.finish()
	}
	if len(res.IDs) == opt.MaxTokens || s.Len() == s.maxContext() {
		s.pending = []int{id}
		if len(res.IDs) < opt.MaxTokens {
			res.StopReason = "context_full"
		}
		return 0, false, d.finish()
	}
	d.unfed = id
	return id, true, nil
}

// Feed feeds the token Next handed out, alone.
func (d *Decoder) Feed(id int) error {
	if err := d.fed(id); err != nil {
		return err
	}
	return d.s.forwardOne(id)
}

func (d *Decoder) fed(id int) error {
	if d.unfed < 0 || d.unfed != id {
		return fmt.Errorf("runtime: feeding token %d, but the decoder handed out %d (-1: none)", id, d.unfed)
	}
	d.unfed = -1
	d.steps++
	return nil
}

func (d *Decoder) emit(id int, t string) {
	d.text = append(d.text, t...)
	if d.opt.OnToken != nil {
		d.opt.OnToken(id, t)
	}
}

// finish flushes the text and times the decode.
func (d *Decoder) finish() error {
	d.done = true
	if rest := d.stream.Flush(); rest != "" {
		d.emit(-1, rest)
	}
	d.res.Text = string(d.text)
	d.res.DecodeSecs = time.Since(d.start).Seconds()
	d.res.DecodeTokS = float64(d.steps) / max(d.res.DecodeSecs, 1e-9)
	return nil
}

// CanBatch reports whether StepBatch can feed several sessions in one
// step (the model implements model.BatchStepper: the qwen35 CPU and GPU
// engines).
func (e *Engine) CanBatch() bool {
	_, ok := e.model.(model.BatchStepper)
	return ok
}

// StepBatch feeds ids[i], the token ds[i].Next handed out, to each
// decoder's session in one step of the model (model.BatchStepper): each
// session ends exactly where its own Feed would leave it. One decoder is
// fed alone. Every decoder must come from a distinct session of this
// engine. On an error every session of the batch refuses further work
// until it is reset or restored.
func (e *Engine) StepBatch(ds []*Decoder, ids []int) error {
	if len(ds) != len(ids) {
		return fmt.Errorf("runtime: StepBatch: %d decoders and %d tokens", len(ds), len(ids))
	}
	if len(ds) == 1 {
		return ds[0].Feed(ids[0])
	}
	bs, ok := e.model.(model.BatchStepper)
	if !ok {
		return fmt.Errorf("runtime: the %s engine cannot step several sequences at once (no batched step)", e.info.Name)
	}
	states := make([]model.State, len(ds))
	for i, d := range ds {
		if d.s.e != e {
			return fmt.Errorf("runtime: StepBatch: decoder %d belongs to another engine", i)
		}
		if d.unfed < 0 || d.unfed != ids[i] {
			return fmt.Errorf("runtime: StepBatch: decoder %d was handed token %d, not %d", i, d.unfed, ids[i])
		}
		states[i] = d.s.st
	}
	for i, d := range ds {
		_ = d.fed(ids[i])
	}
	return bs.StepBatch(states, ids, nil)
}
