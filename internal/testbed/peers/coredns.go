package peers

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// corefile is CoreDNS's configuration for s: one server block per transport, each bound
// to s.Addr only (plugin bind), answering every A query with the population's answer and
// every other query NOERROR without data (plugin template); nothing forwards. (The file
// plugin does not expand a wildcard directly below the root: test.com got NXDOMAIN.)
// CoreDNS's quic:// server speaks ALPN "doq" (RFC 9250), sends NEW_TOKEN, never Retry.
func corefile(s Spec, answer netip.Addr, ttl uint32) string {
	var b strings.Builder
	block := func(scheme string, port uint16, tls bool) {
		if port == 0 {
			return
		}
		fmt.Fprintf(&b, "%s://.:%d {\n\tbind %s\n", scheme, port, s.Addr)
		if tls {
			fmt.Fprintf(&b, "\ttls %s %s\n", s.CertFile, s.KeyFile)
		}
		fmt.Fprintf(&b, "\ttemplate IN A . {\n\t\tanswer \"{{ .Name }} %d IN A %s\"\n\t}\n", ttl, answer)
		b.WriteString("\ttemplate ANY ANY . {\n\t\trcode NOERROR\n\t}\n\terrors\n}\n\n")
	}
	block("dns", s.DNSPort, false)
	block("tls", s.DoTPort, true)
	block("https", s.DoHPort, true)
	for _, p := range s.QUICPorts {
		block("quic", p, true)
	}
	return b.String()
}

func corednsCommand(cfg Config, s Spec) ([]string, error) {
	bin := filepath.Join(cfg.Root, "bin", "coredns")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, ErrNotInstalled)
	}
	conf := filepath.Join(cfg.RunDir, s.Name()+".Corefile")
	if err := os.WriteFile(conf, []byte(corefile(s, cfg.Answer, cfg.AnswerTTL)), 0o644); err != nil {
		return nil, err
	}
	return []string{bin, "-conf", conf}, nil
}
