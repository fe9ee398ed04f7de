package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/nvmai/nvmai/pkg/runtime/qwen35"
)

// SnapshotCodecVersion is the version of the layout Snapshot.WriteTo
// writes (docs/prompt-cache.md, "The snapshot section").
const SnapshotCodecVersion = 1

// maxPending bounds the pending tokens a serialized snapshot may declare:
// a session holds at most the one token sampled last.
const maxPending = 16

var snapshotMagic = [4]byte{'N', 'S', 'N', 'P'}

// WriteTo writes the snapshot: "NSNP", version u32, pending count u32,
// the pending ids u32 each, then the model state (qwen35.State.WriteTo).
// Session.ReadSnapshot reads it back bitwise.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	b := append([]byte(nil), snapshotMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, SnapshotCodecVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(sn.pending)))
	for _, id := range sn.pending {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	n, err := w.Write(b)
	if err != nil {
		return int64(n), err
	}
	m, err := sn.state.WriteTo(w)
	return int64(n) + m, err
}

// ReadSnapshot reads a snapshot that Snapshot.WriteTo wrote, refusing one
// whose model geometry, KV width or length does not fit this session, so
// that Restore can take it. It allocates at most the memory of this
// session's state filled to the declared length.
func (s *Session) ReadSnapshot(r io.Reader) (*Snapshot, error) {
	if s.bs != nil {
		return nil, fmt.Errorf("runtime: this session cannot restore a snapshot (the GPU engine keeps none yet)")
	}
	pending, err := s.readPending(r)
	if err != nil {
		return nil, err
	}
	st, err := s.e.Model.ReadState(r, qwen35.StateOptions{MaxContext: s.state.MaxContext(), KVBits: s.state.KVBits()})
	if err != nil {
		return nil, err
	}
	if st.Len()+len(pending) > s.state.MaxContext() {
		return nil, fmt.Errorf("runtime: the snapshot stands for %d tokens, more than the session's context of %d", st.Len()+len(pending), s.state.MaxContext())
	}
	n := st.Len()
	return &Snapshot{state: st, pending: pending, bytes: s.e.Model.Config().StateBytesAt(max(n, 1), st.KVBits())}, nil
}

func (s *Session) readPending(r io.Reader) ([]int, error) {
	var head [12]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, fmt.Errorf("runtime: reading the snapshot header: %w", unexpectedEOF(err))
	}
	if [4]byte(head[:4]) != snapshotMagic {
		return nil, fmt.Errorf("runtime: not a serialized snapshot (magic %q, want %q)", head[:4], snapshotMagic[:])
	}
	if v := binary.LittleEndian.Uint32(head[4:]); v != SnapshotCodecVersion {
		return nil, fmt.Errorf("runtime: serialized snapshot version %d; this build reads version %d", v, SnapshotCodecVersion)
	}
	count := binary.LittleEndian.Uint32(head[8:])
	if count > maxPending {
		return nil, fmt.Errorf("runtime: the snapshot declares %d pending tokens (at most %d)", count, maxPending)
	}
	raw := make([]byte, 4*count)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("runtime: reading the snapshot's pending tokens: %w", unexpectedEOF(err))
	}
	vocab := s.e.Model.Config().VocabSize
	pending := make([]int, count)
	for i := range pending {
		id := binary.LittleEndian.Uint32(raw[4*i:])
		if id >= uint32(vocab) {
			return nil, fmt.Errorf("runtime: the snapshot's pending token %d is outside the vocabulary of %d", id, vocab)
		}
		pending[i] = int(id)
	}
	return slices.Clip(pending), nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
