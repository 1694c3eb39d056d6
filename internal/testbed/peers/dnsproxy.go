package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// dnsproxyCommand runs AdGuard dnsproxy (the DNS server of AdGuard Home) on s.Addr with
// every service of s: plain DNS, DoT, DoH (and DoH over HTTP/3 on the same port when
// s.DoH3Port is set: dnsproxy's --http3 serves both on the HTTPS port), DoQ on each QUIC
// port, and its cache on (AdGuard Home's default). It resolves test.com from a hosts file
// and forwards every other name to s.Upstream. Every address that could lead it out of
// the testbed is set explicitly: --upstream, --bootstrap (default: the system's
// resolvers), --fallback and --private-rdns-upstream all name s.Upstream, validated to be
// a testbed or loopback address; nothing else in its configuration is an address.
func dnsproxyCommand(cfg Config, s Spec) ([]string, error) {
	bin := Binary(cfg.Root, DNSProxy)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, ErrNotInstalled)
	}
	hosts := filepath.Join(cfg.RunDir, s.Name()+".hosts")
	line := fmt.Sprintf("%s %s\n", cfg.Answer, strings.TrimSuffix(Zone, "."))
	if err := os.WriteFile(hosts, []byte(line), 0o644); err != nil {
		return nil, err
	}
	up := s.Upstream.String()
	argv := []string{bin, "--listen", s.Addr.String(),
		"--upstream", up, "--bootstrap", up, "--fallback", up, "--private-rdns-upstream", up,
		"--hosts-file-enabled", "--hosts-files", hosts, "--cache", "--verbose"}
	argv = append(argv, "--port", fmt.Sprint(s.DNSPort))
	if s.needsTLS() {
		argv = append(argv, "--tls-crt", s.CertFile, "--tls-key", s.KeyFile)
	}
	if s.DoTPort != 0 {
		argv = append(argv, "--tls-port", fmt.Sprint(s.DoTPort))
	}
	if s.DoHPort != 0 {
		argv = append(argv, "--https-port", fmt.Sprint(s.DoHPort))
	}
	if s.DoH3Port != 0 {
		argv = append(argv, "--http3")
	}
	for _, p := range s.QUICPorts {
		argv = append(argv, "--quic-port", fmt.Sprint(p))
	}
	return argv, nil
}
