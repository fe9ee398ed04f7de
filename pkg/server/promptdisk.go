package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"time"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/promptcache"
	"github.com/nvmai/nvmai/pkg/receipt"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// DefaultDiskMinTokens is the shortest prefix whose snapshot is written to
// disk: shorter ones prefill in seconds, and an agent's system and tool
// definitions (the prefix worth keeping) run to thousands of tokens.
const DefaultDiskMinTokens = 1024

// PlainChatMLSHA256 is the template digest of the built-in ChatML renderer
// (the sha256 of tokenizer.PlainChatTemplate, which it renders exactly).
func PlainChatMLSHA256() string {
	s := sha256.Sum256([]byte(tokenizer.PlainChatTemplate))
	return hex.EncodeToString(s[:])
}

// diskTier is a RuntimeEngine's view of the disk cache: its key and the
// snapshots a request took that go to disk once the request is done. All
// methods accept a nil receiver (the tier is off).
type diskTier struct {
	disk    *promptcache.Disk
	key     promptcache.Key
	min     int
	pending []diskWrite
}

type diskWrite struct {
	tokens []int
	snap   *runtime.Snapshot
}

// newDiskTier keys opt.Disk by the install and template, or returns nil
// (logged through the disk's log) when they cannot be named.
func newDiskTier(e *runtime.Engine, sess *runtime.Session, opt RuntimeOptions) *diskTier {
	if opt.Disk == nil {
		return nil
	}
	bits := opt.KVBits
	if bits == 0 {
		bits = model.DefaultKVBits
	}
	key, err := DiskKey(e, opt.TemplateSHA256, bits)
	if err != nil {
		opt.Disk.Logf("prompt cache: the disk tier is off: %v", err)
		return nil
	}
	if !sess.DiskSnapshots() {
		opt.Disk.Logf("prompt cache: the disk tier is off: the %s engine writes no snapshots to disk", e.Info().Name)
		return nil
	}
	return &diskTier{disk: opt.Disk, key: key, min: cmp.Or(opt.DiskMinTokens, DefaultDiskMinTokens)}
}

// DiskKey is the disk-cache key of e's snapshots at the given KV width
// under the chat template whose hex sha256 is templateSHA256. Its model
// part is the sha256 of the install's receipt in canonical form (every
// file's sha256, so any changed weight or tokenizer changes it), the
// payloads' identity (each file's size and modification time, so a file
// changed after its receipt was written, which the receipt does not see,
// changes the key), the RoPE scaling in use (YaRN changes every cached
// key), and, for an engine other than the CPU's, the engine and its
// device (diskKey). The file's device and inode are left out: a reboot may
// renumber devices, and a copy that kept the times holds the same bytes
// (VerifyInstall checks them before a server uses the disk cache).
func DiskKey(e *runtime.Engine, templateSHA256 string, kvBits int) (promptcache.Key, error) {
	return diskKey(e.Install.Dir, e.Info(), templateSHA256, kvBits)
}

// diskKey is DiskKey of the install in dir loaded as info says. The
// engines round differently, so a snapshot resumes only on the engine
// that took it: on another its reader refuses it, and the disk cache
// deletes an entry that does not read back as damaged. A GPU server and a
// CPU server at --kv-bits 32 over one --prompt-cache-dir would otherwise
// share keys and delete each other's entries. So the key names the
// engine and device (info.Name: "gpu (NVIDIA H100 80GB HBM3, sm_90)", so
// a card of another kind, whose kernels may round differently, misses
// too). The CPU engine's keys are as before the GPU was served, so the
// entries of an existing cache directory still hit.
func diskKey(dir string, info model.Info, templateSHA256 string, kvBits int) (promptcache.Key, error) {
	var k promptcache.Key
	t, err := hex.DecodeString(templateSHA256)
	if err != nil || len(t) != len(k.Template) {
		return k, fmt.Errorf("the chat template digest %q is not a hex sha256", templateSHA256)
	}
	copy(k.Template[:], t)
	rc, err := receipt.Read(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil {
		return k, err
	}
	canon, err := receipt.Encode(rc)
	if err != nil {
		return k, err
	}
	hs := sha256.New()
	hs.Write(canon)
	for _, f := range rc.Files {
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Name)))
		if err != nil {
			return k, err
		}
		fmt.Fprintf(hs, "\x00file=%q size=%d mtime=%d", f.Name, fi.Size(), fi.ModTime().UnixNano())
	}
	fmt.Fprintf(hs, "\x00rope_scaling=%+v", info.RopeScaling)
	if info.Device != model.CPU {
		fmt.Fprintf(hs, "\x00device=%q engine=%q", info.Device, info.Name)
	}
	hs.Sum(k.Model[:0])
	k.KVBits = uint32(kvBits)
	return k, nil
}

// VerifyInstall hashes every file of the install at dir and compares it
// with the install's receipt, as --models-dir does when it first loads a
// model. A server that resumes snapshots from disk runs it first: the
// disk key names the receipt, so a damaged payload under an unchanged
// receipt would otherwise resume the snapshots of the intact install and
// generate text no cold run gives. notice gets a line before (hashing tens
// of GB takes a while) and after.
func VerifyInstall(ctx context.Context, dir string, notice func(string)) error {
	rc, err := receipt.Read(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil {
		return fmt.Errorf("%s: no valid receipt (%v); run nvmai-verify --verify-install %s", dir, err, dir)
	}
	var total int64
	for _, f := range rc.Files {
		total += f.Size
	}
	notice(fmt.Sprintf("checking the %d files of %s (%.2f GiB) against its receipt before using --prompt-cache-dir, whose snapshots must come from these exact bytes…", len(rc.Files), dir, float64(total)/(1<<30)))
	start := time.Now()
	probs, err := receipt.CheckContext(ctx, dir, rc, true, goruntime.NumCPU())
	if err != nil {
		return fmt.Errorf("%s: checking the install against its receipt: %w", dir, err)
	}
	if len(probs) > 0 {
		more := ""
		if len(probs) > 1 {
			more = fmt.Sprintf(" (and %d more)", len(probs)-1)
		}
		return fmt.Errorf("%s does not match its receipt: %s%s; the disk prompt cache would resume snapshots of another install's bytes. Run nvmai-verify --verify-install %s, then install or convert the model again",
			dir, probs[0], more, dir)
	}
	notice(fmt.Sprintf("%s: %d files match their receipt's sha256 (%.1fs)", dir, len(rc.Files), time.Since(start).Seconds()))
	return nil
}

// lookup reads the longest disk entry for ids longer than longerThan
// tokens into a snapshot for sess; 0 when there is none.
func (t *diskTier) lookup(sess *runtime.Session, ids []int, longerThan int) (int, *runtime.Snapshot) {
	if t == nil {
		return 0, nil
	}
	var snap *runtime.Snapshot
	t0 := time.Now()
	n, ok := t.disk.Get(t.key, ids, longerThan, func(r io.Reader) error {
		s, err := sess.ReadSnapshot(r)
		snap = s
		return err
	})
	if !ok {
		return 0, nil
	}
	if snap.Len() != n {
		t.disk.Logf("prompt cache: a %d-token entry held a %d-token snapshot; ignored", n, snap.Len())
		return 0, nil
	}
	t.disk.Logf("prompt cache: resumed %d tokens from disk in %.2fs", n, time.Since(t0).Seconds())
	return n, snap
}

// wants says whether a snapshot of tokens goes to disk.
func (t *diskTier) wants(tokens []int) bool { return t != nil && len(tokens) >= t.min }

// add keeps snap for writing when the request is done.
func (t *diskTier) add(tokens []int, snap *runtime.Snapshot) {
	t.pending = append(t.pending, diskWrite{tokens: slices.Clone(tokens), snap: snap})
}

// flushPending hands the request's snapshots to the background writer
// (bounded: what the queue cannot take is dropped and counted), so writing
// never delays a response.
func (t *diskTier) flushPending() {
	if t == nil {
		return
	}
	for _, w := range t.pending {
		t.disk.Enqueue(t.key, w.tokens, func(out io.Writer) error { _, err := w.snap.WriteTo(out); return err })
	}
	t.pending = nil
}

// TemplateSHA256 is the digest that keys r's disk cache entries: the
// template's own sha256, or the built-in ChatML renderer's.
func TemplateSHA256(r Renderer) string {
	if t, ok := r.(interface{ SHA256() string }); ok {
		return t.SHA256()
	}
	return PlainChatMLSHA256()
}
