package promptcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"regexp"
)

// Key says what produced an entry's state; only an identical key hits, so
// an entry written by another install, chat template or KV width is never
// used.
type Key struct {
	Model    [32]byte // the install's receipt digest (and the runtime options that change the math)
	Template [32]byte // sha256 of the chat template's source
	KVBits   uint32
}

// The entry file (docs/prompt-cache.md, "Entry files"): a fixed header,
// then one zstd frame holding the payload (the prefix's token ids as u32
// little-endian, then the encoder's bytes: a runtime snapshot).
const (
	EntryVersion = 1
	headerSize   = 176
	// maxPayload bounds the payload length a header may declare. Nothing
	// is allocated from it (the snapshot decoder allocates what the
	// session's geometry allows); it only bounds how much is read.
	maxPayload = 1 << 40
)

var (
	entryMagic = [8]byte{'N', 'V', 'M', 'A', 'I', '-', 'P', 'C'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	// entryName and tempName are the only names this package creates, and
	// so the only ones it ever deletes (after checking the header's magic).
	entryName = regexp.MustCompile(`^nvmai-pc-[0-9a-f]{64}\.nvpc$`)
	tempName  = regexp.MustCompile(`^\.nvmai-pc-[0-9a-f]{64}\.[0-9]+\.tmp$`)
)

// header is an entry file's fixed header.
type header struct {
	key        Key
	tokens     uint32
	prefix     [32]byte // prefixHash of the tokens
	payloadLen uint64   // uncompressed
	zstdLen    uint64   // the frame's bytes after the header
	payloadSum [32]byte // sha256 of the uncompressed payload
}

func (h *header) marshal() []byte {
	b := make([]byte, 0, headerSize)
	b = append(b, entryMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, EntryVersion)
	b = binary.LittleEndian.AppendUint32(b, headerSize)
	b = append(b, h.key.Model[:]...)
	b = append(b, h.key.Template[:]...)
	b = binary.LittleEndian.AppendUint32(b, h.key.KVBits)
	b = binary.LittleEndian.AppendUint32(b, h.tokens)
	b = append(b, h.prefix[:]...)
	b = binary.LittleEndian.AppendUint64(b, h.payloadLen)
	b = binary.LittleEndian.AppendUint64(b, h.zstdLen)
	b = append(b, h.payloadSum[:]...)
	b = binary.LittleEndian.AppendUint32(b, 0) // reserved
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errNotOurs = errors.New("not a prompt-cache entry (no NVMAI-PC magic)")

// parseHeader reads a header, telling a file that is not ours (errNotOurs)
// from one of ours that is damaged or of another version.
func parseHeader(b []byte) (header, error) {
	var h header
	if len(b) < len(entryMagic) || [8]byte(b[:8]) != entryMagic {
		return h, errNotOurs
	}
	if len(b) < headerSize {
		return h, fmt.Errorf("header cut at %d of %d bytes", len(b), headerSize)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != EntryVersion {
		return h, fmt.Errorf("entry version %d; this build reads version %d", v, EntryVersion)
	}
	if n := binary.LittleEndian.Uint32(b[12:]); n != headerSize {
		return h, fmt.Errorf("header size %d, want %d", n, headerSize)
	}
	if got, want := crc32.Checksum(b[:172], castagnoli), binary.LittleEndian.Uint32(b[172:]); got != want {
		return h, fmt.Errorf("header checksum %08x, recorded %08x", got, want)
	}
	copy(h.key.Model[:], b[16:48])
	copy(h.key.Template[:], b[48:80])
	h.key.KVBits = binary.LittleEndian.Uint32(b[80:])
	h.tokens = binary.LittleEndian.Uint32(b[84:])
	copy(h.prefix[:], b[88:120])
	h.payloadLen = binary.LittleEndian.Uint64(b[120:])
	h.zstdLen = binary.LittleEndian.Uint64(b[128:])
	copy(h.payloadSum[:], b[136:168])
	switch {
	case h.tokens == 0:
		return h, errors.New("the entry holds no tokens")
	case h.payloadLen < 4*uint64(h.tokens) || h.payloadLen > maxPayload:
		return h, fmt.Errorf("payload length %d for %d tokens (at least %d, at most %d)", h.payloadLen, h.tokens, 4*uint64(h.tokens), uint64(maxPayload))
	}
	return h, nil
}

// prefixHash is the sha256 of ids as u32 little-endian values.
func prefixHash(ids []int) [32]byte {
	hs := sha256.New()
	var buf [4096]byte
	for len(ids) > 0 {
		k := min(len(ids), len(buf)/4)
		for i, id := range ids[:k] {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
		}
		hs.Write(buf[:4*k])
		ids = ids[k:]
	}
	var s [32]byte
	hs.Sum(s[:0])
	return s
}

// fileName is the entry's name: a digest of everything that identifies it.
func fileName(key Key, tokens int, prefix [32]byte) string {
	hs := sha256.New()
	hs.Write(key.Model[:])
	hs.Write(key.Template[:])
	hs.Write(binary.LittleEndian.AppendUint32(nil, key.KVBits))
	hs.Write(binary.LittleEndian.AppendUint32(nil, uint32(tokens)))
	hs.Write(prefix[:])
	return "nvmai-pc-" + hex.EncodeToString(hs.Sum(nil)) + ".nvpc"
}
