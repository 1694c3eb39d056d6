package verify

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/quicver"
)

// LibraryUnknown is the label of a server whose evidence matches no signature, or more
// than one, or too little of one.
const LibraryUnknown = "unknown"

// StackEvidence is what a verification saw of the server's QUIC stack: its handshake
// (the qlog of the attempt that got furthest), the verification's own handshake
// offering no ALPN when it made one and it is not the furthest (a server that refused
// every DoQ ALPN), the close of a handshake offering an ALPN no server speaks
// (UnknownALPNProbe), and the Version Negotiation list of the scan (targets of a scan
// only). Stored as quic_stacks.evidence.
type StackEvidence struct {
	Handshake   *qlogana.ServerView `json:"handshake,omitempty"`
	NoALPN      *qlogana.ServerView `json:"no_alpn,omitempty"`
	UnknownALPN *qlogana.ServerView `json:"unknown_alpn,omitempty"`
	// VN is the scan's Version Negotiation list in packet order (grease included).
	VN []uint32 `json:"vn,omitempty"`
}

// Empty reports whether the server showed nothing at all.
func (e *StackEvidence) Empty() bool {
	return e == nil || (viewEmpty(e.Handshake) && viewEmpty(e.NoALPN) && viewEmpty(e.UnknownALPN) && len(e.VN) == 0)
}

func viewEmpty(v *qlogana.ServerView) bool {
	return v == nil || (v.SCIDLen == nil && v.Params == nil && v.Close == nil && v.FirstDatagram == nil)
}

// Stack is a verification's QUIC library identification (a quic_stacks row).
type Stack struct {
	Library   string        // a signature's library, or LibraryUnknown
	Matched   []string      // the features of that signature that held ("feature=value")
	Conflicts []string      // why no label: the signatures the evidence also or never fits
	Evidence  StackEvidence // what the features were read from
}

// Feature names: what a server shows that differs between implementations. Every one
// is read from quic-go's qlog of our own connections (ServerView) or the scan's VN list;
// none needs a hand-made packet.
const (
	featSCIDLen       = "scid_len"             // its connection IDs' length
	featFirstDatagram = "first_datagram_bytes" // how far it pads the datagram of its first flight
	featMaxUDPPayload = "tp.max_udp_payload_size"
	featMaxAckDelay   = "tp.max_ack_delay"
	featActiveCIDs    = "tp.active_connection_id_limit"
	featMaxData       = "tp.initial_max_data"
	featStreamData    = "tp.initial_max_stream_data_bidi_local"
	featALPNClose     = "alpn_close"         // reason and trigger of its CONNECTION_CLOSE for an unknown ALPN
	featALPNCloseCode = "alpn_close_code"    // that close's error space and code
	featNoALPNClose   = "no_alpn_close_code" // its close's space and code for a ClientHello without ALPN
	featRetryToken    = "retry_token_len"    // its Retry token's length less the ODCID the token answers
	featNewToken      = "new_token_len"      // its NEW_TOKEN token's length
	featVN            = "vn"                 // the versions its VN lists, and how many greased ones
)

// closeCode0x178 is the close of a TLS no_application_protocol alert (RFC 9001 §4.8:
// CRYPTO_ERROR 0x100 + 120), every signature's answer to an ALPN it does not speak.
const closeCode0x178 = "transport 0x178"

// absentParam is what quic-go logs for a transport parameter the server did not send
// and whose RFC 9000 default is 2^62-1 (max_udp_payload_size: 65527 is the default, and
// quic-go keeps the varint maximum).
const absentParam = "4611686018427387903"

// signature is one library's values for the features, each a set of the values its
// defaults give. A value a server's own configuration sets (idle timeout, stream limits)
// is not a feature: CoreDNS, dnsproxy and simserver are all quic-go with different ones.
type signature struct {
	library string
	want    map[string][]string
}

// vnQuicGo: quic-go lists its configured versions (v1 and/or v2) and one greased version
// at a random position (protocol.GetGreasedVersions).
var vnQuicGo = []string{"v1+g1", "v2+g1", "v1,v2+g1"}

// Token lengths come from each library's token format; the client's address in it is 4
// or 16 bytes (an IPv4 client on a dual-stack socket is 16), and quic-go's NEW_TOKEN
// holds the RTT in 1..4 bytes (ASN.1): every length the format gives is listed.
var (
	// quic-go: 32-byte salt, 16-byte tag, the ASN.1 of (retry flag, address, time, RTT,
	// ODCID, the Retry's 4-byte SCID) beside the ODCID; a NEW_TOKEN has no CIDs.
	retryQuicGo    = []string{"81", "93"}
	newTokenQuicGo = []string{"77", "78", "79", "80", "89", "90", "91", "92"}
	// aioquic: 12-byte nonce, 16-byte tag, address and port, ODCID, its 8-byte Retry
	// SCID and a time, each CID with a length byte. It sends no NEW_TOKEN.
	retryAioquic = []string{"53", "65"}
	// quinn (quinn-proto 0.11: a type byte, the address, a time, 16-byte tag, 16-byte
	// nonce): 46 bytes for an IPv4 client (lazydns), 58 for IPv6. hickory-dns sends none.
	newTokenQuinn = []string{"46", "58"}
	// ngtcp2 0.12: 57 bytes, seen from gtlsserver to an IPv4 client (the testbed
	// captures); no IPv6 client seen.
	newTokenNgtcp2 = []string{"57"}
)

// signatures are the libraries told apart, with the values observed on this machine
// (docs/verify.md "Which QUIC library": every peer of the testbed, captured in
// internal/verify/testdata/stacks). They are defaults of the library (quic-go, quinn,
// aioquic) or, for ngtcp2, of its example server, which real ngtcp2 servers may change.
var signatures = []signature{
	{"quic-go", map[string][]string{
		featSCIDLen:       {"4"},
		featFirstDatagram: {"1280"},
		featMaxUDPPayload: {"1452"},
		featMaxAckDelay:   {"26"},
		featActiveCIDs:    {"4"},
		featMaxData:       {"786432"},
		featStreamData:    {"524288"},
		featALPNClose:     {`""`},
		featALPNCloseCode: {closeCode0x178},
		featNoALPNClose:   {closeCode0x178},
		featRetryToken:    retryQuicGo,
		featNewToken:      newTokenQuicGo,
		featVN:            vnQuicGo,
	}},
	{"quinn", map[string][]string{
		featSCIDLen:       {"8"},
		featFirstDatagram: {"1200"},
		featMaxAckDelay:   {"25"},
		featActiveCIDs:    {"5"},
		featMaxData:       {absentParam},
		featStreamData:    {"1250000"},
		featALPNClose:     {`"peer doesn't support any known protocol"`},
		featALPNCloseCode: {closeCode0x178},
		featNoALPNClose:   {closeCode0x178},
		featNewToken:      newTokenQuinn,
		featVN:            {"draft-29,draft-30,draft-31,draft-32,draft-33,draft-34,v1+g1"},
	}},
	{"aioquic", map[string][]string{
		featSCIDLen:       {"8"},
		featFirstDatagram: {"1200"},
		featMaxUDPPayload: {absentParam},
		featMaxAckDelay:   {"25"},
		featActiveCIDs:    {"8"},
		featMaxData:       {"1048576"},
		featStreamData:    {"1048576"},
		featALPNClose:     {`"No common ALPN protocols" crypto`},
		featALPNCloseCode: {closeCode0x178},
		featNoALPNClose:   {closeCode0x178},
		featRetryToken:    retryAioquic,
		featVN:            {"v1,v2+g0", "v1+g0", "v2+g0"},
	}},
	{"ngtcp2", map[string][]string{
		featSCIDLen:       {"18"},
		featFirstDatagram: {"1200"},
		featMaxUDPPayload: {absentParam},
		featMaxAckDelay:   {"25"},
		featActiveCIDs:    {"7"},
		featMaxData:       {"1048576"},
		featStreamData:    {"262144"},
		featALPNClose:     {`""`},
		featALPNCloseCode: {closeCode0x178},
		// gtlsserver refuses a ClientHello without ALPN with internal_error (80).
		featNoALPNClose: {"transport 0x150"},
		featNewToken:    newTokenNgtcp2,
		featVN:          {"v1+g1"},
	}},
}

// Libraries lists the labels the signatures give, in table order.
func Libraries() []string {
	out := make([]string, len(signatures))
	for i, s := range signatures {
		out[i] = s.library
	}
	return out
}

// minMatches is how many features of a signature must hold (and none contradict it)
// for its label, counting only values that tell libraries apart (tellsApart): one or
// two coinciding values are not an identification.
const minMatches = 3

// features reads each feature's value from the evidence; a feature the evidence does
// not show is absent (it neither supports nor contradicts a signature).
func (e *StackEvidence) features() map[string]string {
	f := map[string]string{}
	views := []*qlogana.ServerView{e.Handshake, e.NoALPN, e.UnknownALPN}
	for _, v := range views {
		if v != nil && v.SCIDLen != nil {
			f[featSCIDLen] = strconv.Itoa(*v.SCIDLen)
			break
		}
	}
	if h := e.Handshake; h != nil {
		// A datagram holding the server's handshake flight (not a close alone).
		if d := h.FirstDatagram; d != nil && slices.Contains(d.Packets, "handshake") {
			f[featFirstDatagram] = strconv.Itoa(d.Bytes)
		}
		for feat, param := range map[string]string{featMaxUDPPayload: "max_udp_payload_size", featMaxAckDelay: "max_ack_delay",
			featActiveCIDs: "active_connection_id_limit", featMaxData: "initial_max_data", featStreamData: "initial_max_stream_data_bidi_local"} {
			if raw, ok := h.Params[param]; ok {
				f[feat] = strings.TrimSpace(string(raw))
			}
		}
	}
	// Tokens: a server that sends none shows nothing (the feature is absent).
	for _, v := range views {
		if v == nil {
			continue
		}
		if _, ok := f[featRetryToken]; !ok && v.RetryTokenLen != nil && v.RetryODCIDLen != nil {
			f[featRetryToken] = strconv.Itoa(*v.RetryTokenLen - *v.RetryODCIDLen)
		}
		if _, ok := f[featNewToken]; !ok && v.NewTokenLen != nil {
			f[featNewToken] = strconv.Itoa(*v.NewTokenLen)
		}
	}
	for _, v := range []*qlogana.ServerView{e.UnknownALPN, e.NoALPN, e.Handshake} {
		if v == nil || !isALPNAlert(v.Close) {
			continue
		}
		s := strconv.Quote(v.Close.Reason)
		if v.Close.Trigger != "" {
			s += " " + v.Close.Trigger
		}
		f[featALPNClose] = s
		break
	}
	switch u := e.UnknownALPN; {
	case u != nil && refusesALPN(u.Close, e.Handshake):
		f[featALPNCloseCode] = closeCode(u.Close)
	case e.Handshake != nil && isALPNAlert(e.Handshake.Close), e.NoALPN != nil && isALPNAlert(e.NoALPN.Close):
		f[featALPNCloseCode] = closeCode0x178 // our DoQ ALPNs refused
	}
	if n := e.NoALPN; n != nil && n.Close != nil && n.Close.Code != nil && n.Close.Space == "transport" {
		f[featNoALPNClose] = closeCode(n.Close)
	}
	if len(e.VN) > 0 {
		f[featVN] = vnFeature(e.VN)
	}
	return f
}

// isALPNAlert reports whether c is a TLS no_application_protocol alert.
func isALPNAlert(c *qlogana.Close) bool {
	return c != nil && c.TLSAlert != nil && *c.TLSAlert == alertNoApplicationProto
}

// refusesALPN reports whether c, the server's close of the unknown-ALPN probe, is its
// answer to the ALPN: the no_application_protocol alert, or a transport or application
// code that the verification's own handshake (hs) was not closed with. Another TLS
// alert speaks of what else the probe lacks (a name, a certificate: the server's
// configuration), and a code every handshake gets (CONNECTION_REFUSED) of the server's
// state: neither is a feature.
func refusesALPN(c *qlogana.Close, hs *qlogana.ServerView) bool {
	switch {
	case c == nil || c.Code == nil:
		return false
	case isALPNAlert(c):
		return true
	case c.TLSAlert != nil:
		return false
	}
	return hs == nil || hs.Close == nil || hs.Close.Code == nil || closeCode(hs.Close) != closeCode(c)
}

// closeCode is a close's error space and code ("transport 0x178").
func closeCode(c *qlogana.Close) string {
	space := c.Space
	if space == "" {
		space = "transport"
	}
	return space + " 0x" + strconv.FormatUint(*c.Code, 16)
}

// vnFeature is a VN list as "the versions it names, sorted by name, +g<number
// of greased versions>": order is not a feature (quic-go greases at a random position).
func vnFeature(vs []uint32) string {
	var names []string
	grease := 0
	for _, v := range vs {
		if quicver.IsGrease(v) {
			grease++
			continue
		}
		names = append(names, quicver.Name(v))
	}
	sort.Strings(names)
	return strings.Join(names, ",") + "+g" + strconv.Itoa(grease)
}

// Identify names the library of the evidence: the one signature at least minMatches of
// whose features hold, with none contradicted, while every other signature is
// contradicted at least once. Anything else is LibraryUnknown with the reason.
func Identify(e StackEvidence) Stack {
	st := Stack{Library: LibraryUnknown, Evidence: e}
	f := e.features()
	type score struct {
		lib             string
		matched, missed []string
		telling         int // matched features whose value some other library does not have
	}
	var fits []score
	var near []string
	for _, sig := range signatures {
		var sc score
		sc.lib = sig.library
		for _, feat := range sortedKeys(sig.want) {
			v, ok := f[feat]
			if !ok {
				continue
			}
			if slices.Contains(sig.want[feat], v) {
				sc.matched = append(sc.matched, feat+"="+v)
				if tellsApart(feat, v) {
					sc.telling++
				}
			} else {
				sc.missed = append(sc.missed, feat+"="+v)
			}
		}
		switch {
		case len(sc.missed) == 0 && sc.telling >= minMatches:
			fits = append(fits, sc)
		case len(sc.missed) == 0:
			near = append(near, fmt.Sprintf("%s: only %d feature(s) shown", sc.lib, sc.telling))
		}
	}
	switch len(fits) {
	case 1:
		st.Library, st.Matched = fits[0].lib, fits[0].matched
	case 0:
		if len(f) == 0 {
			st.Conflicts = []string{"no feature shown"}
		} else {
			st.Conflicts = append([]string{"no signature fits " + featureList(f)}, near...)
		}
	default:
		for _, sc := range fits {
			st.Conflicts = append(st.Conflicts, sc.lib+" fits too")
		}
	}
	return st
}

// tellsApart reports whether a library's value v of feat is one some other signature
// does not allow. A value every library shares (each closes an unknown ALPN with 0x178)
// confirms none: it may contradict a signature but does not count towards minMatches.
func tellsApart(feat, v string) bool {
	for _, sig := range signatures {
		if want, ok := sig.want[feat]; ok && !slices.Contains(want, v) {
			return true
		}
	}
	return false
}

func featureList(f map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(f) {
		parts = append(parts, k+"="+f[k])
	}
	return strings.Join(parts, " ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// evidenceJSON is the stored form of the evidence.
func (e StackEvidence) evidenceJSON() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		return []byte(`{}`)
	}
	return b
}
