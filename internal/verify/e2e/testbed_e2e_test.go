// End-to-end verification against the simulated internet (docs/testbed.md): every test
// of this package runs inside the testbed's vantage namespace (TestMain below), and
// every QUIC endpoint of the population must be classified exactly as the population's
// ground truth (population.ExpectVerify) says, third-party peers included, with the
// negotiated ALPN and QUIC version, the SNI found by the retry, the certificate
// (leaf name, CA-issued vs self-signed against the testbed PKI's roots) and, through the
// whole pipeline, the GeoIP rows of the resolvers.
//
//	go test ./internal/verify/e2e -v     # as root; skips with the reason otherwise
//
// Without root (or iproute2, /dev/net/tun) every test here skips with the reason; the
// unit tests live in internal/verify and need neither.
package e2e_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/geodb"
	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/verify"
)

func TestMain(m *testing.M) { os.Exit(testbed.RunInVantage(m, testbed.Options{Servers: true})) }

// e2eConcurrency is moderate: the testbed's servers, the delay line and the verifier
// share 2 cores, and a CPU-starved handshake that misses 2 s would be a false timeout.
const e2eConcurrency = 64

// groundTruth is what the tests take from the population.
type groundTruth struct {
	pop      *population.Population
	pki      *pki.PKI
	targets  []netip.AddrPort // QUIC endpoints verified (peers that are not installed left out)
	want     map[netip.AddrPort]population.Verdict
	rec      map[netip.AddrPort]*population.Record
	sniNames []string // every name the population's SNI hosts need: the verifier's --sni-names
}

func loadGroundTruth(t *testing.T) groundTruth {
	t.Helper()
	v := testbed.Require(t)
	pop := v.Population
	if pop == nil {
		t.Fatal("the testbed runs without a population file")
	}
	k, err := pki.New(pop)
	if err != nil {
		t.Fatal(err)
	}
	g := groundTruth{pop: pop, pki: k, want: map[netip.AddrPort]population.Verdict{}, rec: map[netip.AddrPort]*population.Record{}}
	// A peer the testbed did not start (testbed.PeerSilent) is left out; every other
	// peer is expected like any server.
	for _, e := range pop.QUICEndpoints() {
		r := pop.Lookup(e.Addr)
		if err := testbed.PeerSilent(t, pop, r); err != nil {
			t.Logf("excluding %s: %v", e.Addr, err)
			continue
		}
		a := netip.AddrPortFrom(e.Addr, e.Port)
		g.targets = append(g.targets, a)
		g.want[a] = pop.ExpectVerify(e.Addr, e.Port)
		g.rec[a] = r
		if r.SNI != "" && !slices.Contains(g.sniNames, r.SNI) {
			g.sniNames = append(g.sniNames, r.SNI)
		}
	}
	if len(g.targets) == 0 {
		t.Fatal("the population has no QUIC endpoint")
	}
	return g
}

// special reports whether an endpoint belongs to a behaviour class tested one by one
// (everything except the bulk classes, which repeat those behaviours at scale).
func (g groundTruth) special(a netip.AddrPort) bool {
	return !strings.HasPrefix(g.rec[a].Class, "bulk-")
}

// caIssued reports whether chain (leaf first, as sent) verifies against the testbed
// PKI's roots, whatever the name: CA-issued as opposed to self-signed.
func (g groundTruth) caIssued(chain []*x509.Certificate) bool {
	if len(chain) == 0 {
		return false
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: g.pki.Roots(), Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

// fields is what a verification recorded, from a verify.Result or a database row.
type fields struct {
	outcome, detail, alpn, sni, sniSource string
	quicVersion                           uint32
	leafCN                                string
	caIssued                              bool
	certValid                             *bool
	chainLen                              int
}

// check compares one verification with the population's verdict and returns what differs.
func (g groundTruth) check(a netip.AddrPort, f fields) []string {
	w := g.want[a]
	if f.outcome != w.Class {
		return []string{fmt.Sprintf("outcome %s (%s), population says %s", f.outcome, f.detail, w.Class)}
	}
	var bad []string
	if w.ALPN != "" && f.alpn != w.ALPN {
		bad = append(bad, fmt.Sprintf("ALPN %q, population says %q", f.alpn, w.ALPN))
	}
	if w.Version != "" {
		if n, _ := quicver.Lookup(w.Version); f.quicVersion != n {
			bad = append(bad, fmt.Sprintf("QUIC version %#x, population says %s (%#x)", f.quicVersion, w.Version, n))
		}
	}
	if verify.Outcome(w.Class) == verify.OutcomeDoQNoALPN {
		// The attempt without ALPN completed: none negotiated, the framing that worked in
		// the detail; its certificate is checked below like any handshake's.
		if f.alpn != "" || !strings.Contains(f.detail, "no ALPN, length-prefixed framing (RFC 9250)") {
			bad = append(bad, fmt.Sprintf("ALPN %q, detail %q: want none and the framing that worked", f.alpn, f.detail))
		}
	} else if w.ALPN == "" {
		return bad // no handshake: nothing more was recorded
	}
	// The SNI retry: a host that needs a name is found with the one from the list.
	if w.SNI != "" && (f.sni != w.SNI || f.sniSource != verify.SNIList) {
		bad = append(bad, fmt.Sprintf("SNI %q (source %s), population says %q from the list (without it: %s)", f.sni, f.sniSource, w.SNI, w.NoSNIClass))
	}
	// Without a name the host must have refused as the population says (unrecognized_name,
	// RFC 6066 §3): the retry was needed, not a lucky second attempt.
	if verify.Outcome(w.NoSNIClass) == verify.OutcomeSNIRequired && !strings.Contains(f.detail, "without SNI: server sent tls: unrecognized name") {
		bad = append(bad, fmt.Sprintf("detail %q does not show the no-SNI attempt failing with unrecognized_name", f.detail))
	}
	if w.SNI == "" && f.sniSource != verify.SNINone {
		bad = append(bad, fmt.Sprintf("SNI %q (source %s) although the host needs none", f.sni, f.sniSource))
	}
	if c, ok := g.pop.Certs[w.Cert]; ok {
		if f.leafCN != c.CN {
			bad = append(bad, fmt.Sprintf("leaf CN %q, population's certificate %s says %q", f.leafCN, w.Cert, c.CN))
		}
		if want := 1 + c.Intermediates; f.chainLen != want {
			bad = append(bad, fmt.Sprintf("chain of %d certificates, population's %s sends %d", f.chainLen, w.Cert, want))
		}
	}
	if f.caIssued == w.SelfSigned {
		bad = append(bad, fmt.Sprintf("CA-issued=%v against the testbed roots, population says self-signed=%v", f.caIssued, w.SelfSigned))
	}
	// cert_valid_for_sni: the chain validates for the name used. With a name, that is
	// CA-issued; without one the address is checked, and testbed certificates name no address.
	if f.certValid == nil {
		bad = append(bad, "no certificate validation recorded")
	} else if want := w.SNI != "" && !w.SelfSigned; *f.certValid != want {
		bad = append(bad, fmt.Sprintf("cert_valid_for_sni=%v, want %v (SNI %q, self-signed %v)", *f.certValid, want, w.SNI, w.SelfSigned))
	}
	return bad
}

// checkLibrary compares a verification's QUIC library identification with the
// population's (ExpectLibrary: simserver, CoreDNS and dnsproxy are quic-go, hickory
// quinn, the aioquic example aioquic, gtlsserver ngtcp2); "" when they agree. A server
// that speaks no QUIC shows no stack. One that does may show too little of it only when
// nothing answered (a timeout on a lossy path).
func (g groundTruth) checkLibrary(a netip.AddrPort, st *verify.Stack) string {
	want := g.pop.ExpectLibrary(a.Addr())
	switch {
	case want == "" && st != nil && st.Library != verify.LibraryUnknown:
		return fmt.Sprintf("QUIC library %s, but nothing there speaks QUIC (matched %v)", st.Library, st.Matched)
	case want == "":
	case st == nil:
		return fmt.Sprintf("no QUIC library evidence, population says %s", want)
	case st.Library != want:
		return fmt.Sprintf("QUIC library %s (matched %v, conflicts %v), population says %s", st.Library, st.Matched, st.Conflicts, want)
	}
	return ""
}

func resultFields(g groundTruth, r verify.Result) fields {
	f := fields{outcome: string(r.Outcome), detail: r.Detail, alpn: r.ALPN, sni: r.SNI, sniSource: r.SNISource,
		quicVersion: r.QUICVersion, certValid: r.CertValid, chainLen: len(r.Chain), caIssued: g.caIssued(r.Chain)}
	if len(r.Chain) > 0 {
		f.leafCN = r.Chain[0].Subject.CommonName
	}
	return f
}

// TestTestbedEveryQUICHostClassified verifies every endpoint of the population's special
// classes (all behaviours, hostile ones and third-party peers included) one by one with
// the verify.Verifier, checks every recorded field against the population and that no target
// outlives its deadline. Timeouts the population does not expect get the second pass
// the command gives them (--retry-timeouts): lossy paths drop handshakes.
func TestTestbedEveryQUICHostClassified(t *testing.T) {
	g := loadGroundTruth(t)
	var targets []netip.AddrPort
	for _, a := range g.targets {
		if g.special(a) {
			targets = append(targets, a)
		}
	}
	v, err := verify.New(verify.Config{SNINames: g.sniNames, Roots: g.pki.Roots()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := v.Config()
	results := make([]verify.Result, len(targets))
	verifyAll := func(idx []int, conc int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, conc)
		for _, i := range idx {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				a := targets[i]
				t0 := time.Now()
				results[i] = v.Verify(context.Background(), verify.Target{Addr: a})
				// The deadline is the target timeout; a second for scheduling on a loaded machine.
				if d := time.Since(t0); d > cfg.TargetTimeout+time.Second {
					t.Errorf("%s (%s): took %v, past the %v deadline", a, g.rec[a].Class, d, cfg.TargetTimeout)
				}
			}()
		}
		wg.Wait()
	}
	all := make([]int, len(targets))
	for i := range all {
		all[i] = i
	}
	verifyAll(all, e2eConcurrency)
	var again []int
	for i, a := range targets {
		if results[i].Outcome == verify.OutcomeTimeout && verify.Outcome(g.want[a].Class) != verify.OutcomeTimeout {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		t.Logf("second pass over %d unexpected timeouts", len(again))
		verifyAll(again, e2eConcurrency/8)
	}
	byClass, peersSeen, libs := map[string]int{}, map[string]int{}, map[string]int{}
	for i, a := range targets {
		r := results[i]
		byClass[string(r.Outcome)]++
		if p := g.rec[a].Peer; p != "" {
			peersSeen[p]++
		}
		for _, b := range g.check(a, resultFields(g, r)) {
			t.Errorf("%s (%s%s): %s", a, g.rec[a].Class, peerTag(g.rec[a]), b)
		}
		if b := g.checkLibrary(a, r.Stack); b != "" {
			t.Errorf("%s (%s%s): %s", a, g.rec[a].Class, peerTag(g.rec[a]), b)
		} else if r.Stack != nil {
			libs[r.Stack.Library]++
		}
	}
	t.Logf("QUIC libraries identified: %v", libs)
	t.Logf("%d endpoints of %d classes verified: %v; peers: %v", len(targets), len(g.pop.Classes()), byClass, peersSeen)
}

// runVerify runs the whole pipeline (targets file -> verify.Run -> database, with the
// testbed's GeoIP databases and PKI roots) over g's targets under label; header, if not
// empty, is written as a comment line at the top of the targets file.
func runVerify(t *testing.T, g groundTruth, label, header string) (*store.Store, *verify.Summary) {
	t.Helper()
	s := storetest.Open(t)
	dir := t.TempDir()
	built := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	geo, err := geodb.Write(g.pop, filepath.Join(dir, "geoip"), built)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "targets.txt")
	var sb strings.Builder
	if header != "" {
		sb.WriteString("# " + header + "\n")
	}
	for _, a := range g.targets {
		sb.WriteString(a.String() + "\n")
	}
	if err := os.WriteFile(p, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	sum, err := verify.Run(context.Background(), s, verify.RunConfig{Verify: verify.Config{SNINames: g.sniNames, Roots: g.pki.Roots()},
		Vantage: "testbed", Label: label, TargetsFile: p, Concurrency: e2eConcurrency, RetryTimeouts: true,
		CityDB: geo.City, ASNDB: geo.ASN}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return s, sum
}

// storedRow is what checkStoredRows keeps of a stored result: the address family the
// database gives the address and the DER of the stored leaf certificate (nil without one).
type storedRow struct {
	family int32
	leaf   []byte
}

// checkStoredRows compares every result of run runID with the population (g.check) and
// returns them by target; a row for an address that is no target is an error.
func checkStoredRows(t *testing.T, ctx context.Context, s *store.Store, g groundTruth, runID int64) map[netip.AddrPort]storedRow {
	t.Helper()
	rows, err := s.Pool.Query(ctx, `SELECT address, family(address), port, outcome, detail, coalesce(alpn, ''),
		coalesce(quic_version, 0), coalesce(sni, ''), coalesce(sni_source, ''), cert_valid_for_sni,
		coalesce(array_length(cert_chain, 1), 0),
		(SELECT c.der FROM certificates c WHERE c.sha256 = cert_chain[1])
		FROM verification_results WHERE run_id = $1`, runID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.AddrPort]storedRow{}
	for rows.Next() {
		var addr netip.Addr
		var family, port int32
		var qv int64
		var f fields
		var leaf []byte
		if err := rows.Scan(&addr, &family, &port, &f.outcome, &f.detail, &f.alpn, &qv, &f.sni, &f.sniSource,
			&f.certValid, &f.chainLen, &leaf); err != nil {
			t.Fatal(err)
		}
		f.quicVersion = uint32(qv)
		a := netip.AddrPortFrom(addr, uint16(port))
		seen[a] = storedRow{family: family, leaf: leaf}
		if _, ok := g.want[a]; !ok {
			t.Errorf("%s: stored but not a target", a)
			continue
		}
		if len(leaf) > 0 {
			c, err := x509.ParseCertificate(leaf)
			if err != nil {
				t.Errorf("%s: stored leaf: %v", a, err)
			} else {
				f.leafCN = c.Subject.CommonName
			}
		}
		// CA-issued vs self-signed: the stored chain against the testbed roots.
		f.caIssued = storedChainCAIssued(t, ctx, s.Pool, g, runID, a)
		for _, b := range g.check(a, f) {
			t.Errorf("%s (%s%s) stored: %s", a, g.rec[a].Class, peerTag(g.rec[a]), b)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return seen
}

func peerTag(r *population.Record) string {
	if r.Peer == "" {
		return ""
	}
	return ", peer " + r.Peer
}

// TestTestbedRunMatchesPopulation runs the whole pipeline (targets file -> verify.Run ->
// database, with the testbed's GeoIP databases and PKI roots) over every QUIC endpoint
// of the population, then compares every stored result and every resolver_geo row with
// the population.
func TestTestbedRunMatchesPopulation(t *testing.T) {
	g := loadGroundTruth(t)
	ctx := context.Background()
	s, sum := runVerify(t, g, "e2e", "")
	t.Logf("%d targets in %.1f s (%.0f/s): %v", sum.Targets, sum.Elapsed, sum.Rate, sum.Outcomes)
	want := map[string]int{}
	for _, a := range g.targets {
		want[g.want[a].Class]++
	}
	for _, o := range verify.Outcomes.Values() {
		if sum.Outcomes[o] != want[string(o)] {
			t.Errorf("summary: %s %d, population says %d", o, sum.Outcomes[o], want[string(o)])
		}
	}

	// The servers that speak DoQ only without ALPN are stored as such: alpn '' (known:
	// none), their QUIC version and rcode, and not as resolvers (checked below).
	var noALPN int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM verification_results WHERE run_id = $1
		AND outcome = 'doq-no-alpn' AND alpn = '' AND quic_version IS NOT NULL AND dns_rcode IS NOT NULL`,
		sum.RunID).Scan(&noALPN); err != nil {
		t.Fatal(err)
	}
	if noALPN == 0 || noALPN != want[string(verify.OutcomeDoQNoALPN)] {
		t.Errorf("%d doq-no-alpn rows with alpn '', a version and an rcode; population says %d", noALPN, want[string(verify.OutcomeDoQNoALPN)])
	}

	// Every stored row against the population.
	seen := checkStoredRows(t, ctx, s, g, sum.RunID)

	// quic_stacks: every endpoint whose server speaks QUIC and answered is stored with
	// the library the population names.
	stacks, err := s.Pool.Query(ctx, `SELECT q.address, q.port, q.library, q.matched, q.conflicts, v.outcome
		FROM quic_stacks q JOIN verification_results v USING (run_id, address, port) WHERE q.run_id = $1`, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	stored, libs := map[netip.AddrPort]bool{}, map[string]int{}
	for stacks.Next() {
		var addr netip.Addr
		var port int32
		var st verify.Stack
		var outcome string
		if err := stacks.Scan(&addr, &port, &st.Library, &st.Matched, &st.Conflicts, &outcome); err != nil {
			t.Fatal(err)
		}
		a := netip.AddrPortFrom(addr.Unmap(), uint16(port))
		stored[a] = true
		libs[st.Library]++
		if b := g.checkLibrary(a, &st); b != "" {
			t.Errorf("%s (%s%s) quic_stacks: %s", a, g.rec[a].Class, peerTag(g.rec[a]), b)
		}
	}
	if err := stacks.Err(); err != nil {
		t.Fatal(err)
	}
	for _, a := range g.targets {
		if g.pop.ExpectLibrary(a.Addr()) != "" && !stored[a] && g.want[a].Class != string(verify.OutcomeTimeout) {
			t.Errorf("%s (%s): no quic_stacks row", a, g.rec[a].Class)
		}
	}
	t.Logf("quic_stacks: %v", libs)
	for _, a := range g.targets {
		if _, ok := seen[a]; !ok {
			t.Errorf("%s: no stored result", a)
		}
	}

	// resolver_geo: every resolver (an address that answered DNS over DoQ with an rcode)
	// located exactly where the population puts it.
	wantRes := map[netip.Addr]bool{}
	for _, a := range g.targets {
		switch verify.Outcome(g.want[a].Class) {
		case verify.OutcomeVerified, verify.OutcomeRefused, verify.OutcomeDNSError:
			wantRes[a.Addr()] = true
		}
	}
	grows, err := s.Pool.Query(ctx, `SELECT address, coalesce(asn, 0), coalesce(as_org, ''), coalesce(country, ''),
		coalesce(continent, ''), coalesce(city, ''), latitude, longitude FROM resolver_geo`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[netip.Addr]bool{}
	for grows.Next() {
		var addr netip.Addr
		var asn int64
		var org, country, cont, city string
		var lat, lon *float64
		if err := grows.Scan(&addr, &asn, &org, &country, &cont, &city, &lat, &lon); err != nil {
			t.Fatal(err)
		}
		got[addr] = true
		r := g.pop.Lookup(addr)
		if r == nil {
			t.Errorf("resolver_geo %s: not in the population", addr)
			continue
		}
		site, as := g.pop.Sites[r.Site], g.pop.ASNs[r.ASN]
		if uint32(asn) != r.ASN || org != as.Org {
			t.Errorf("resolver_geo %s: AS%d %q, population says AS%d %q", addr, asn, org, r.ASN, as.Org)
		}
		if country != site.Country || cont != site.Continent || city != site.City {
			t.Errorf("resolver_geo %s: %s/%s/%s, population's site %s says %s/%s/%s", addr, country, cont, city,
				r.Site, site.Country, site.Continent, site.City)
		}
		if lat == nil || lon == nil || math.Abs(*lat-site.Lat) > 1e-6 || math.Abs(*lon-site.Lon) > 1e-6 {
			t.Errorf("resolver_geo %s: coordinates %v,%v, population's site %s says %v,%v", addr, deref(lat), deref(lon), r.Site, site.Lat, site.Lon)
		}
	}
	if err := grows.Err(); err != nil {
		t.Fatal(err)
	}
	var missing, extra []string
	for a := range wantRes {
		if !got[a] {
			missing = append(missing, a.String())
		}
	}
	for a := range got {
		if !wantRes[a] {
			extra = append(extra, a.String())
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("resolver_geo: %d resolvers missing %v, %d not resolvers %v", len(missing), missing, len(extra), extra)
	}
	t.Logf("resolver_geo: %d rows, %d resolvers expected", len(got), len(wantRes))
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// storedChainCAIssued rebuilds a stored chain from the certificates table and checks it
// against the testbed roots.
func storedChainCAIssued(t *testing.T, ctx context.Context, pool *pgxpool.Pool, g groundTruth, runID int64, a netip.AddrPort) bool {
	t.Helper()
	var ders [][]byte
	err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(c.der ORDER BY u.i), '{}') FROM verification_results v,
		unnest(v.cert_chain) WITH ORDINALITY AS u(sha, i) JOIN certificates c ON c.sha256 = u.sha
		WHERE v.run_id = $1 AND v.address = $2 AND v.port = $3`, runID, a.Addr(), int32(a.Port())).Scan(&ders)
	if err != nil {
		t.Fatalf("%s: stored chain: %v", a, err)
	}
	chain := make([]*x509.Certificate, 0, len(ders))
	for _, d := range ders {
		c, err := x509.ParseCertificate(d)
		if err != nil {
			t.Errorf("%s: stored certificate: %v", a, err)
			return false
		}
		chain = append(chain, c)
	}
	return g.caIssued(chain)
}
