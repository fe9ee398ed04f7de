package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// guard refuses what a web page in the user's browser could send: a Host
// header that is not this server's (DNS rebinding: a page's own name made
// to resolve to 127.0.0.1) and an Origin that --cors-origin does not
// allow (a cross-site request). Programs other than browsers send no
// Origin and the host they connected to.
func (h *Host) guard(r *http.Request) error {
	if (h.opt.APIKey == "" || len(h.opt.AllowedHosts) > 0) && !h.hostAllowed(r.Host) {
		return &Error{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "host_not_allowed",
			Message: fmt.Sprintf("Host %q is not this server's: use http://127.0.0.1 or http://localhost, or start the server with --allowed-host NAME", r.Host)}
	}
	if origin := r.Header.Get("Origin"); origin != "" && !h.originAllowed(origin, r.Host) {
		return &Error{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "origin_not_allowed",
			Message: fmt.Sprintf("requests from web pages at %s are refused: start the server with --cors-origin %s to allow them", origin, origin)}
	}
	return nil
}

// hostAllowed reports whether a Host header names this server: a
// loopback name or address (any port), the --host address, or an
// --allowed-host name. An empty Host (HTTP/1.0) comes from no browser.
func (h *Host) hostAllowed(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	if l := strings.ToLower(strings.Trim(h.opt.ListenHost, "[]")); l != "" && host == l {
		if ip := net.ParseIP(l); ip == nil || !ip.IsUnspecified() {
			return true
		}
	}
	for _, a := range h.opt.AllowedHosts {
		a = strings.TrimSuffix(strings.ToLower(a), ".")
		if a == host || a == strings.ToLower(hostport) {
			return true
		}
	}
	return false
}

// originAllowed reports whether a browser request from origin may be
// served: --cors-origin allows it, or it is the page the server itself
// is served from (its host and port are the request's Host, which guard
// has checked when no API key protects the server).
func (h *Host) originAllowed(origin, host string) bool {
	if o := h.opt.CORSOrigin; o == "*" || o != "" && strings.EqualFold(origin, o) {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, host)
}
