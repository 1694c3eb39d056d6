// Package hostile is the one vocabulary of the ways doqscan's own servers misbehave: the
// testbed's population (`hostile=` in testbed/population.txt, its ground truth), simdns's
// classes, simquic's raw responders, measuretest's in-process servers and verify's test
// servers all name a behaviour with a constant of this package, listed once in
// Behaviours in the manner of internal/outcome's tables: each name with its one-line
// meaning and, where a transport differs, what it does there.
//
// The names are stored (population files, the JSON form of a parsed population that
// Python reads, ground truth in docs): a name never changes. Each server declares the
// part it acts out as a Subset, with a reason for every entry it leaves out
// (population.Hostile, simdns.Hostile, measuretest.Served, verify's servedHostile);
// Subset.Check holds each to the whole table, and TestNoSecondSpelling fails when a name
// is spelt as a string literal in those packages.
//
// It is a leaf (standard library only) outside internal/testbed: the testbed's servers
// and population import it, and so do measuretest and verify's tests, which the
// no-testbed-in-product lint rule keeps from importing anything under internal/testbed.
package hostile

import (
	"fmt"
	"slices"

	"github.com/doqscan/doqscan/internal/outcome"
)

// Behaviour names one way a server misbehaves.
type Behaviour string

// None is a well-behaved server (population: no hostile= key). It is not in Behaviours.
const None Behaviour = ""

// The behaviours (meanings in Behaviours).
const (
	Stall       Behaviour = "stall"
	Garbage     Behaviour = "garbage"
	Truncated   Behaviour = "truncated"
	Endless     Behaviour = "endless"
	WrongLength Behaviour = "wrong-length"
	WrongID     Behaviour = "wrong-id"
	Reset       Behaviour = "reset"
	CloseApp    Behaviour = "close-app"
	TLSStall    Behaviour = "tls-stall"
	BadVN       Behaviour = "bad-vn"
	DraftOnly   Behaviour = "draft-only"
	Flood       Behaviour = "flood"
	Drip        Behaviour = "drip"
	HugeHeaders Behaviour = "huge-headers"
)

// Entry is one behaviour with its meaning, and what it does on a transport where that
// differs from Meaning ("" there: Meaning applies, or the transport has no such
// behaviour, as Meaning says).
type Entry struct {
	Behaviour Behaviour
	Meaning   string // one line: what the server does
	UDP       string // DoUDP (port 53)
	TCP       string // DoTCP and DoT: 2-byte length-prefixed messages over TCP or TLS
	QUIC      string // QUIC packets, DoQ streams
	HTTP      string // DoH (HTTP/2) and DoH3 (HTTP/3) responses
}

// Behaviours lists every behaviour, in the order reports print them.
var Behaviours = Table{
	{Behaviour: Stall, Meaning: "accepts the connection and reads the query, never answers",
		UDP:  "nothing is sent",
		TCP:  "TCP connect (DoT: the TLS handshake) completes, the query is never answered",
		QUIC: "the QUIC handshake completes, the DoQ stream is never answered",
		HTTP: "TLS and the request complete, no response"},
	{Behaviour: Garbage, Meaning: "random bytes that are not a DNS message instead of a reply",
		TCP:  "correctly framed (length prefix of the random bytes)",
		QUIC: "population and simquic: random bytes for every datagram, no handshake; measuretest and verify: framed random bytes on the DoQ stream",
		HTTP: "as an application/dns-message body"},
	{Behaviour: Truncated, Meaning: "the first part of a correct reply, its framing intact: only the DNS parser can notice",
		QUIC: "DoQ reply framed with the length of the cut message"},
	{Behaviour: Endless, Meaning: "a reply that never ends",
		UDP:  "a bounded burst of datagrams (simdns: replies with wrong IDs; measuretest: 1200 random bytes each)",
		TCP:  "simdns: length prefix 65535, then a trickle of bytes; measuretest: random bytes without end",
		QUIC: "a DoQ reply stream that never ends (no FIN)",
		HTTP: "200 with a body that never ends"},
	{Behaviour: WrongLength, Meaning: "a 2-byte length prefix that disagrees with the message, then the end of the stream",
		UDP:  "no prefix on UDP: a cut or random reply instead",
		HTTP: "simdns: Content-Length larger than the body; measuretest: 503 status"},
	{Behaviour: WrongID, Meaning: "a correct reply whose DNS message ID is not the query's"},
	{Behaviour: Reset, Meaning: "the exchange is reset instead of answered",
		UDP:  "nothing like a reset: simdns sends nothing, measuretest a cut reply",
		TCP:  "reads the first bytes (query / ClientHello), then RST (SO_LINGER 0)",
		QUIC: "DoQ stream reset (RESET_STREAM, DOQ_INTERNAL_ERROR)",
		HTTP: "stream reset (HTTP/2 RST_STREAM; simdns: TCP RST after the ClientHello)"},
	{Behaviour: CloseApp, Meaning: "the connection is closed with an application error (DOQ_EXCESSIVE_LOAD) instead of a reply",
		QUIC: "CONNECTION_CLOSE with DOQ_EXCESSIVE_LOAD after the query"},
	{Behaviour: TLSStall, Meaning: "accepts a TLS connection, reads the ClientHello, never answers it",
		UDP: "as stall", TCP: "DoTCP: as stall"},
	{Behaviour: BadVN, Meaning: "a malformed Version Negotiation packet (version list cut mid-entry) for every long-header packet",
		QUIC: "no handshake ever"},
	{Behaviour: DraftOnly, Meaning: "a well-formed Version Negotiation packet listing only draft versions, never a handshake"},
	{Behaviour: Flood, Meaning: "keeps the client busy until its deadline with what it must skip or wait through, never completing an answer",
		UDP:  "a random datagram at each tick",
		TCP:  "a 65,535-byte length prefix, then one byte per packet",
		QUIC: "DoQ: as TCP; DoH3: unknown HTTP/3 frames as fast as flow control allows",
		HTTP: "DoH: 200, then the body one byte per DATA frame"},
	{Behaviour: Drip, Meaning: "HTTP only: 200, then the body one byte per DATA frame until the client leaves"},
	{Behaviour: HugeHeaders, Meaning: "HTTP only: a HEADERS frame declaring more bytes than any client takes, none of them sent",
		HTTP: "HTTP/3: 2^40 bytes; HTTP/2: the longest frame it can declare (2^24-1)"},
}

// Table is an ordered list of behaviours with their meanings.
type Table []Entry

// Values returns the behaviours in table order.
func (t Table) Values() []Behaviour {
	out := make([]Behaviour, len(t))
	for i, e := range t {
		out[i] = e.Behaviour
	}
	return out
}

// Has says whether b is a behaviour of the table.
func (t Table) Has(b Behaviour) bool {
	return slices.ContainsFunc(t, func(e Entry) bool { return e.Behaviour == b })
}

// Lookup returns b's entry.
func (t Table) Lookup(b Behaviour) (Entry, bool) {
	for _, e := range t {
		if e.Behaviour == b {
			return e, true
		}
	}
	return Entry{}, false
}

// Check returns an error unless every behaviour is non-empty, unique and has a meaning
// (outcome.Table's check).
func (t Table) Check() error {
	o := make(outcome.Table[Behaviour], len(t))
	for i, e := range t {
		o[i] = outcome.Entry[Behaviour]{Status: e.Behaviour, Meaning: e.Meaning}
	}
	return o.Check()
}

// Subset is the part of Behaviours one server implements: the behaviours it acts out, and
// for every other entry why not.
type Subset struct {
	Implements []Behaviour
	Omits      map[Behaviour]string // behaviour -> why this server does not act it out
}

// Check returns an error unless Implements and Omits together are exactly Behaviours, each
// behaviour in one of them, and every omission has a reason.
func (s Subset) Check() error {
	seen := map[Behaviour]bool{}
	for _, b := range s.Implements {
		if !Behaviours.Has(b) {
			return fmt.Errorf("implements %q, which is not in hostile.Behaviours", b)
		}
		if seen[b] {
			return fmt.Errorf("implements %q twice", b)
		}
		seen[b] = true
	}
	for b, why := range s.Omits {
		switch {
		case !Behaviours.Has(b):
			return fmt.Errorf("omits %q, which is not in hostile.Behaviours", b)
		case seen[b]:
			return fmt.Errorf("both implements and omits %q", b)
		case why == "":
			return fmt.Errorf("omits %q without a reason", b)
		}
		seen[b] = true
	}
	for _, b := range Behaviours.Values() {
		if !seen[b] {
			return fmt.Errorf("%q neither implemented nor omitted with a reason", b)
		}
	}
	return nil
}
