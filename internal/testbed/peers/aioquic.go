package peers

import (
	"fmt"
	"os"
	"path/filepath"
)

// aioquicCommand runs aioquic's examples/doq_server.py (ALPN "doq", no NEW_TOKEN; with
// --retry every new connection gets a Retry). The example forwards each query over UDP
// to --resolver port 53, whose default is a public resolver: it is always set here, to
// s.Upstream (validated to be a testbed or loopback address).
func aioquicCommand(cfg Config, s Spec) ([]string, error) {
	py := filepath.Join(cfg.Root, ".venv", "bin", "python")
	script := filepath.Join(cfg.Root, "var", "peers", "aioquic-"+Versions[Aioquic], "examples", "doq_server.py")
	for _, f := range []string{py, script} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%s: %w", f, ErrNotInstalled)
		}
	}
	if s.Upstream.Port() != 53 {
		return nil, fmt.Errorf("aioquic's doq_server.py always forwards to port 53, not %d", s.Upstream.Port())
	}
	argv := []string{py, script,
		"--host", s.Addr.String(), "--port", fmt.Sprint(s.quicPort()),
		"--certificate", s.CertFile, "--private-key", s.KeyFile,
		"--resolver", s.Upstream.Addr().String()}
	if s.Retry {
		argv = append(argv, "--retry")
	}
	return argv, nil
}
