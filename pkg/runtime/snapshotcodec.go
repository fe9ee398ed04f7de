package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/nvmai/nvmai/pkg/model"
)

// SnapshotCodecVersion is the version of the layout Snapshot.WriteTo
// writes (docs/prompt-cache.md, "The snapshot section").
const SnapshotCodecVersion = 1

// maxPending bounds the pending tokens a serialized snapshot may declare:
// a session holds at most the one token sampled last.
const maxPending = 16

var snapshotMagic = [4]byte{'N', 'S', 'N', 'P'}

// WriteTo writes the snapshot: "NSNP", version u32, pending count u32,
// the pending ids u32 each, then the model state in its architecture's
// own layout (qwen35.State.WriteTo). Session.ReadSnapshot reads it back
// bitwise.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	state, ok := sn.snap.(io.WriterTo)
	if !ok {
		return 0, fmt.Errorf("runtime: this engine's snapshots cannot be written to disk")
	}
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
	m, err := state.WriteTo(w)
	return int64(n) + m, err
}

// ReadSnapshot reads a snapshot that Snapshot.WriteTo wrote, refusing one
// whose model geometry, KV width or length does not fit this session, so
// that Restore can take it. It allocates at most the memory of this
// session's state filled to the declared length.
func (s *Session) ReadSnapshot(r io.Reader) (*Snapshot, error) {
	reader, ok := s.st.(model.SnapshotReader)
	if !ok {
		return nil, fmt.Errorf("runtime: this session cannot read a snapshot from disk (the %s engine writes none yet)", s.e.info.Name)
	}
	pending, err := s.readPending(r)
	if err != nil {
		return nil, err
	}
	snap, err := reader.ReadSnapshot(r)
	if err != nil {
		return nil, err
	}
	if n := snap.Len() + len(pending); n > s.st.MaxContext() {
		return nil, fmt.Errorf("runtime: the snapshot stands for %d tokens, more than the session's context of %d", n, s.st.MaxContext())
	}
	return &Snapshot{snap: snap, pending: pending}, nil
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
	vocab := s.e.info.VocabSize
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
