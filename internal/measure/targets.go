package measure

import (
	"fmt"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/listfile"
)

// CheckTarget checks the endpoints of a targets-file line (listfile.Targets, the grammar
// verify and measure share): every protocol is one of Protocols, an ALPN is given only
// for DoQ and is a known DoQ ALPN; a DoQ endpoint without one gets the first (doq). It
// returns t with those ALPNs filled in.
func CheckTarget(t listfile.Target) (listfile.Target, error) {
	eps := make([]listfile.Endpoint, 0, len(t.Endpoints))
	for _, ep := range t.Endpoints {
		p := Protocol(ep.Protocol)
		if _, err := For(p); err != nil {
			return t, err
		}
		switch {
		case p == DoQ && ep.ALPN == "":
			ep.ALPN = doq.Versions[0].ALPN
		case p == DoQ:
			if _, ok := doq.Lookup(ep.ALPN); !ok {
				return t, fmt.Errorf("unknown DoQ ALPN %q", ep.ALPN)
			}
		case ep.ALPN != "":
			return t, fmt.Errorf("%s=%d/%s: an ALPN is given for DoQ only", p, ep.Port, ep.ALPN)
		}
		var err error
		if eps, err = listfile.AddEndpoint(eps, ep); err != nil {
			return t, err
		}
	}
	t.Endpoints = eps
	return t, nil
}
