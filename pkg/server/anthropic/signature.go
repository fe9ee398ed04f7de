package anthropic

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Thinking signatures. Anthropic returns each thinking block with an
// opaque signature and expects it back unchanged; a client may not edit
// the thinking it passes back. This server's signature is
//
//	"nvmai1." + base64(HMAC-SHA256(key, "nvmai thinking v1\x00" + thinking))
//
// so that, when a block comes back, the server recognises its own thinking
// (and that it is unchanged) and renders it as the turn's reasoning, which
// the prompt cache needs to match the tokens it generated.
//
// The key is Options.SignatureKey, or a built-in constant. With the
// constant, signatures survive restarts (a disk prompt cache then still
// matches a conversation's history), and any nvmai server recognises any
// other's. It is recognition, not authentication: nothing depends on a
// client being unable to forge one (the client writes the whole prompt
// anyway); give a secret key to make forging impossible.
const (
	signaturePrefix  = "nvmai1."
	signatureContext = "nvmai thinking v1\x00"
)

var defaultSignatureKey = []byte("nvmai anthropic thinking signature key v1")

type signer struct{ key []byte }

func newSigner(key []byte) signer {
	if len(key) == 0 {
		key = defaultSignatureKey
	}
	return signer{key: key}
}

func (s signer) mac(thinking string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(signatureContext))
	m.Write([]byte(thinking))
	return m.Sum(nil)
}

// sign returns the signature of a thinking block's text.
func (s signer) sign(thinking string) string {
	return signaturePrefix + base64.StdEncoding.EncodeToString(s.mac(thinking))
}

// own reports whether signature is this server's for exactly thinking.
func (s signer) own(thinking, signature string) bool {
	enc, ok := strings.CutPrefix(signature, signaturePrefix)
	if !ok {
		return false
	}
	got, err := base64.StdEncoding.DecodeString(enc)
	return err == nil && hmac.Equal(got, s.mac(thinking))
}
