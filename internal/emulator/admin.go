package emulator

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// AdminTokenEnv is the environment variable of --admin-token.
const AdminTokenEnv = "ZEROBUS_EMULATOR_ADMIN_TOKEN"

// adminPrefix is the path prefix of the emulator's own API: rows of every
// table, faults, stats and grants. It is not the service's, so nothing of
// Databricks authenticates it: the emulator answers it only to a loopback
// client, or, when an admin token is configured, to whoever presents it as
// a bearer token (a container publishing the port, a remote test runner).
const adminPrefix = "/emulator/v1/"

// guardAdmin wraps the workspace handler: requests under adminPrefix pass
// adminAllowed first; everything else (OAuth, UC, SQL) is next's.
func (s *Server) guardAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, adminPrefix) {
			if code, msg := s.adminAllowed(r); code != 0 {
				if code == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="zerobus-emulator admin"`)
				}
				http.Error(w, msg, code)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// adminAllowed says whether r may use the admin API: with an admin token,
// only with "Authorization: Bearer <token>" (compared in constant time),
// from anywhere; without one, only from a loopback address. It returns 0
// when allowed, else the status and message of the refusal.
func (s *Server) adminAllowed(r *http.Request) (int, string) {
	if tok := s.cfg.AdminToken; tok != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			return http.StatusUnauthorized, "the emulator's admin API needs Authorization: Bearer <admin token> (--admin-token / " + AdminTokenEnv + ")"
		}
		return 0, ""
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return http.StatusForbidden, "the emulator's admin API answers loopback clients only; start the emulator with --admin-token (or " + AdminTokenEnv + ") to use it from " + host + " with Authorization: Bearer <admin token>"
	}
	return 0, ""
}

// adminMode describes who may use the admin API, for the start-up banner
// and log.
func adminMode(cfg Config) string {
	if cfg.AdminToken != "" {
		return "bearer admin token required (--admin-token / " + AdminTokenEnv + ")"
	}
	return "loopback clients only (set --admin-token / " + AdminTokenEnv + " to allow others with a bearer token)"
}
