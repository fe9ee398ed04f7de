package fakehub

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// HTTP2Only is a server that speaks nothing but HTTP/2.
type HTTP2Only struct {
	URL string
	// Served counts requests that reached the handler (over HTTP/2);
	// an HTTP/1.1-only client must leave it at 0.
	Served atomic.Int64
	pool   *x509.CertPool
}

// CertPool trusts the TLS variant's certificate.
func (s *HTTP2Only) CertPool() *x509.CertPool { return s.pool }

// NewHTTP2OnlyTLS starts a TLS server whose ALPN offers only "h2" and whose
// HTTP/1 support is switched off: a client that insists on HTTP/1.1 gets
// the connection closed on it.
func NewHTTP2OnlyTLS(t testing.TB) *HTTP2Only {
	t.Helper()
	h := &HTTP2Only{}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Served.Add(1)
		w.Write([]byte(`{"sha":"0000000000000000000000000000000000000000"}`))
	}))
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	s.Config.Protocols = &protocols
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{NextProtos: []string{"h2"}}
	s.StartTLS()
	t.Cleanup(s.Close)
	h.URL = s.URL
	h.pool = x509.NewCertPool()
	h.pool.AddCert(s.Certificate())
	return h
}

// NewHTTP2Cleartext starts a plain-TCP server that behaves like an h2c
// (prior knowledge) server: whatever arrives, it answers with an HTTP/2
// SETTINGS frame and a GOAWAY, then closes.
func NewHTTP2Cleartext(t testing.TB) *HTTP2Only {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fakehub: listen: %v", err)
	}
	h := &HTTP2Only{URL: "http://" + ln.Addr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				var buf [512]byte
				conn.Read(buf[:]) // the client's request, whatever it is
				conn.Write([]byte{
					0, 0, 0, 0x4, 0, 0, 0, 0, 0, // SETTINGS, empty, stream 0
					0, 0, 8, 0x7, 0, 0, 0, 0, 0, // GOAWAY, 8 bytes, stream 0
					0, 0, 0, 0, 0, 0, 0, 0x1, // last stream 0, PROTOCOL_ERROR
				})
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return h
}
