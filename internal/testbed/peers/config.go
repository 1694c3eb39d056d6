package peers

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// command writes s's configuration under cfg.RunDir and returns its command line.
func command(cfg Config, s Spec, zoneFile string) ([]string, error) {
	switch s.Kind {
	case CoreDNS:
		return corednsCommand(cfg, s)
	case Hickory:
		return hickoryCommand(cfg, s, zoneFile)
	case Aioquic:
		return aioquicCommand(cfg, s)
	case Ngtcp2:
		return ngtcp2Command(cfg, s)
	case DNSProxy:
		return dnsproxyCommand(cfg, s)
	case LazyDNS:
		return lazydnsCommand(cfg, s)
	}
	return nil, fmt.Errorf("unknown kind %q", s.Kind)
}

// zoneText is the root zone every DNS-serving peer loads. Its wildcard A record
// answers every name (test.com, which the measurement queries, included) with the
// population's answer; other types get NOERROR without data, as the population's
// resolvers do (docs/population.md, directive answer).
func zoneText(answer netip.Addr, ttl uint32) string {
	return fmt.Sprintf(`$ORIGIN .
$TTL %[2]d
@	IN SOA	ns1.%[3]s hostmaster.%[3]s 2026112201 3600 600 86400 %[2]d
@	IN NS	ns1.%[3]s
*	IN A	%[1]s
`, answer, ttl, Zone)
}

func writeZone(dir string, answer netip.Addr, ttl uint32) (string, error) {
	zdir := filepath.Join(dir, "zones")
	if err := os.MkdirAll(zdir, 0o755); err != nil {
		return "", fmt.Errorf("peers: %w", err)
	}
	f := filepath.Join(zdir, "root.zone")
	if err := os.WriteFile(f, []byte(zoneText(answer, ttl)), 0o644); err != nil {
		return "", fmt.Errorf("peers: %w", err)
	}
	return f, nil
}

// pemCopies copies s's certificate chain and key to <dir>/<name>.{cert,key}.pem.
func pemCopies(dir string, s Spec) (cert, key string, err error) {
	cert = filepath.Join(dir, s.Name()+".cert.pem")
	key = filepath.Join(dir, s.Name()+".key.pem")
	for src, dst := range map[string]string{s.CertFile: cert, s.KeyFile: key} {
		b, err := os.ReadFile(src)
		if err != nil {
			return "", "", fmt.Errorf("peers: %w", err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return "", "", fmt.Errorf("peers: %w", err)
		}
	}
	return cert, key, nil
}
