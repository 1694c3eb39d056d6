package probe

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"

	"github.com/doqscan/doqscan/internal/optout/pace"
	"github.com/doqscan/doqscan/internal/provenance"
)

// plan is what a scan sends: the probe payloads, the probe kind per port (in scan
// order), and the classifier for the replies.
type plan struct {
	quicPkt, dnsPkt []byte
	kinds           map[uint16]ProbeKind
	order           []uint16
	cl              *Classifier
}

// newPlan builds the probes and assigns them to ports; a port may carry one probe only.
func newPlan(q QUICProbe, d DNSProbe, quicPorts, dnsPorts []uint16) (*plan, error) {
	quicPkt, err := q.Build()
	if err != nil {
		return nil, err
	}
	dnsPkt, err := d.Build()
	if err != nil {
		return nil, err
	}
	pl := &plan{quicPkt: quicPkt, dnsPkt: dnsPkt, kinds: map[uint16]ProbeKind{}}
	for _, p := range quicPorts {
		if _, dup := pl.kinds[p]; dup {
			return nil, fmt.Errorf("port %d given twice", p)
		}
		pl.kinds[p] = ProbeQUIC
		pl.order = append(pl.order, p)
	}
	for _, p := range dnsPorts {
		if _, dup := pl.kinds[p]; dup {
			return nil, fmt.Errorf("port %d given for both probes", p)
		}
		pl.kinds[p] = ProbeDNS
		pl.order = append(pl.order, p)
	}
	if len(pl.order) == 0 {
		return nil, errors.New("no ports to scan")
	}
	if pl.cl, err = NewClassifier(q, d, pl.kinds); err != nil {
		return nil, err
	}
	return pl, nil
}

// ports32 is the scan order as the scans table stores it.
func (pl *plan) ports32() []int32 {
	out := make([]int32, len(pl.order))
	for i, p := range pl.order {
		out[i] = int32(p)
	}
	return out
}

// checkPace refuses a scan that would send more than the opt-out page promises
// (pace.MaxPerSlash16 probes per second on average) towards some /16: zmap runs once
// per port at z's rate, spread by its random permutation over the targets (all of IPv4
// for an internet-wide scan) minus the blocklist. smallest is the shortest probe
// payload, the fastest a --bandwidth turns into packets.
func checkPace(z ZmapRun, safety *Safety, smallest int) error {
	if smallest <= 0 {
		smallest = 1
	}
	rate, err := z.PacketsPerSecond(smallest)
	if err != nil {
		return err
	}
	var targets []netip.Prefix
	if !safety.InternetWide {
		targets = safety.Targets
	}
	var excluded []netip.Prefix
	for _, e := range safety.List.Effective() {
		excluded = append(excluded, e.Prefix)
	}
	return pace.CheckScanPace(rate, targets, excluded)
}

// probes describes the plan's payloads for a provenance record (kind, ports, SHA-256).
func (pl *plan) probes() []provenance.Probe {
	var out []provenance.Probe
	for _, k := range []ProbeKind{ProbeQUIC, ProbeDNS} {
		pkt := pl.quicPkt
		if k == ProbeDNS {
			pkt = pl.dnsPkt
		}
		var ports []int
		for _, p := range pl.order {
			if pl.kinds[p] == k {
				ports = append(ports, int(p))
			}
		}
		if len(ports) > 0 {
			h := sha256.Sum256(pkt)
			out = append(out, provenance.NewProbe(string(k), ports, h[:]))
		}
	}
	return out
}

// provenance is the record of a scan from this vantage point with this plan; z is the
// zmap that sends it (nil: the built-in sender).
func (pl *plan) provenance(vantage, location, contact string, z *provenance.Zmap) provenance.Record {
	r := provenance.New("zprobe", provenance.Vantage{ID: vantage, Location: location, Contact: contact})
	r.Zmap, r.Probes = z, pl.probes()
	return r
}

// groupPorts splits the ports to send into zmap runs: one per port, or with zmap 4.x
// (multi) one per probe for all the ports that carry it, in scan order.
func groupPorts(send []uint16, kinds map[uint16]ProbeKind, multi bool) [][]uint16 {
	var out [][]uint16
	at := map[ProbeKind]int{}
	for _, p := range send {
		if !multi {
			out = append(out, []uint16{p})
			continue
		}
		i, ok := at[kinds[p]]
		if !ok {
			at[kinds[p]] = len(out)
			out = append(out, []uint16{p})
			continue
		}
		out[i] = append(out[i], p)
	}
	return out
}

// packet is the probe payload a port carries.
func (pl *plan) packet(port uint16) []byte {
	if pl.kinds[port] == ProbeDNS {
		return pl.dnsPkt
	}
	return pl.quicPkt
}
