package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// hickoryConfig is hickory-dns's TOML configuration for s. Ports that are zero are
// disabled. drop_privileges = false: as root it would otherwise switch to nobody,
// which cannot read the key files and does not exist in every container.
func hickoryConfig(s Spec, zoneDir, zoneFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen_addrs_ipv4 = [%q]\n", s.Addr.String())
	fmt.Fprintf(&b, "directory = %q\n", zoneDir)
	b.WriteString("drop_privileges = false\n")
	if s.DNSPort != 0 {
		fmt.Fprintf(&b, "listen_port = %d\n", s.DNSPort)
	} else {
		b.WriteString("disable_udp = true\ndisable_tcp = true\n")
	}
	if s.DoTPort != 0 {
		fmt.Fprintf(&b, "tls_listen_port = %d\n", s.DoTPort)
	} else {
		b.WriteString("disable_tls = true\n")
	}
	if p := s.quicPort(); p != 0 {
		fmt.Fprintf(&b, "quic_listen_port = %d\n", p)
	} else {
		b.WriteString("disable_quic = true\n")
	}
	if s.CertFile != "" {
		fmt.Fprintf(&b, "\n[tls_cert]\npath = %q\nprivate_key = %q\n", s.CertFile, s.KeyFile)
	}
	fmt.Fprintf(&b, "\n[[zones]]\nzone = \".\"\nzone_type = \"Primary\"\nfile = %q\n", filepath.Base(zoneFile))
	return b.String()
}

func hickoryCommand(cfg Config, s Spec, zoneFile string) ([]string, error) {
	bin := filepath.Join(cfg.Root, "var", "peers", "bin", "hickory-dns")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, ErrNotInstalled)
	}
	// hickory insists on the .pem extension for both files.
	if !strings.HasSuffix(s.CertFile, ".pem") || !strings.HasSuffix(s.KeyFile, ".pem") {
		var err error
		if s.CertFile, s.KeyFile, err = pemCopies(cfg.RunDir, s); err != nil {
			return nil, err
		}
	}
	conf := filepath.Join(cfg.RunDir, s.Name()+".toml")
	if err := os.WriteFile(conf, []byte(hickoryConfig(s, filepath.Dir(zoneFile), zoneFile)), 0o644); err != nil {
		return nil, err
	}
	return []string{bin, "--config", conf}, nil
}
