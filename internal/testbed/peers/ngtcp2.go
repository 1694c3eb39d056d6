package peers

import (
	"fmt"
	"os"
	"path/filepath"
)

// ngtcp2Server is the Debian package ngtcp2-server's example server (GnuTLS backend).
const ngtcp2Server = "/usr/sbin/gtlsserver"

// ngtcp2Command runs ngtcp2's example HTTP/3 server: QUIC that is not DoQ (it offers
// ALPN h3 and hq-interop only). Its document root is an empty directory, never the
// working directory (its default). -V makes it send Retry to every new connection.
func ngtcp2Command(cfg Config, s Spec) ([]string, error) {
	if _, err := os.Stat(ngtcp2Server); err != nil {
		return nil, fmt.Errorf("%s: %w", ngtcp2Server, ErrNotInstalled)
	}
	htdocs := filepath.Join(cfg.RunDir, "htdocs-empty")
	if err := os.MkdirAll(htdocs, 0o755); err != nil {
		return nil, err
	}
	argv := []string{ngtcp2Server, "--quiet", "--htdocs", htdocs}
	if s.Retry {
		argv = append(argv, "--validate-addr")
	}
	return append(argv, s.Addr.String(), fmt.Sprint(s.quicPort()), s.KeyFile, s.CertFile), nil
}
