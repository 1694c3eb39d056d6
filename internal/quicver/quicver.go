// Package quicver names QUIC version numbers: the one table of versions doqscan knows
// (IETF versions and drafts, greased values, Google QUIC tags, vendor ranges), shared by
// the scan's Version Negotiation parser, verification and the figures.
package quicver

import (
	"fmt"
	"strings"
)

// Well-known QUIC versions (uint32 on the wire).
const (
	// Negotiation is the version field of a Version Negotiation packet (RFC 9000 §17.2.1).
	Negotiation uint32 = 0x00000000
	// V1 is QUIC version 1 (RFC 9000 §15).
	V1 uint32 = 0x00000001
	// V2 is QUIC version 2 (RFC 9369 §3.1).
	V2 uint32 = 0x6b3343cf
	// Draft29 .. Draft34 are the IETF drafts draft-ietf-quic-transport-NN (0xff0000NN).
	Draft29 uint32 = 0xff00001d
	Draft30 uint32 = 0xff00001e
	Draft31 uint32 = 0xff00001f
	Draft32 uint32 = 0xff000020
	Draft33 uint32 = 0xff000021
	Draft34 uint32 = 0xff000022
	// ProbeGrease is the reserved version the scan probe carries by default: it matches
	// the 0x?a?a?a?a pattern reserved for forcing Version Negotiation (RFC 9000 §15).
	ProbeGrease uint32 = 0x1a2a3a4a
	// ProbeAllOnes is what the original study's payload carried (0xffffffff): not
	// reserved by RFC 9000, but unknown to every stack, so it also forces VN.
	ProbeAllOnes uint32 = 0xffffffff
)

// Known lists the versions doqscan names exactly, in order: the IETF versions and the
// drafts that servers still advertise in Version Negotiation. Other drafts, grease values,
// Google tags and vendor values are named by rule (Name). The testbed's population file
// names its versions from this list; the Python analysis reads it from
// analysis/doqscan_analysis/quic_versions.json, which a test keeps equal to this table.
var Known = []struct {
	Name  string
	Value uint32
}{
	{"v1", V1}, {"v2", V2},
	{"draft-29", Draft29}, {"draft-30", Draft30}, {"draft-31", Draft31},
	{"draft-32", Draft32}, {"draft-33", Draft33}, {"draft-34", Draft34},
}

// Lookup returns the value of a name in Known.
func Lookup(name string) (uint32, bool) {
	for _, k := range Known {
		if k.Name == name {
			return k.Value, true
		}
	}
	return 0, false
}

// IsGrease says whether v matches 0x?a?a?a?a, the versions RFC 9000 §15 reserves for
// exercising version negotiation (servers list them in VN to keep clients honest).
func IsGrease(v uint32) bool { return v&0x0f0f0f0f == 0x0a0a0a0a }

// IsDraft says whether v is an IETF draft version 0xff0000NN and returns NN.
func IsDraft(v uint32) (int, bool) {
	if v&0xffffff00 == 0xff000000 {
		return int(v & 0xff), true
	}
	return 0, false
}

// Family groups versions for figures.
type Family string

// Families of QUIC versions.
const (
	FamilyIETF     Family = "ietf"     // v1, v2
	FamilyDraft    Family = "draft"    // draft-ietf-quic-transport-NN
	FamilyGrease   Family = "grease"   // 0x?a?a?a?a
	FamilyGoogle   Family = "google"   // gQUIC Q0xx / T0xx tags
	FamilyVendor   Family = "vendor"   // vendor-specific (mvfst, msquic, ...)
	FamilyReserved Family = "reserved" // 0x00000000 (VN) and other reserved values
	FamilyUnknown  Family = "unknown"
)

// vendor is one vendor value or range from the IANA "QUIC Versions" registry and the
// quicwg/base-drafts wiki "QUIC Versions" list (as recalled offline: the names are for
// figures; an unknown value is printed in hex, never guessed).
type vendor struct {
	value, mask uint32
	name        string
}

// vendors is matched in order: exact values first, then ranges.
var vendors = []vendor{
	{0xfaceb001, 0xffffffff, "mvfst-d22"},      // Facebook mvfst, draft-22
	{0xfaceb002, 0xffffffff, "mvfst-d27"},      // Facebook mvfst, draft-27
	{0xfaceb00e, 0xffffffff, "mvfst-exp"},      // Facebook mvfst, experimental
	{0xfaceb010, 0xffffffff, "mvfst-alias"},    // Facebook mvfst, alias of v1
	{0xfaceb000, 0xfffffff0, "mvfst"},          // other 0xfaceb00X
	{0xabcd0000, 0xfffffff0, "msquic"},         // Microsoft MsQuic 0xabcd000X
	{0xf0f0f0f0, 0xfffffff0, "eth-zurich"},     // ETH Zürich measurability experiments
	{0xf0f0f1f0, 0xfffffff0, "telecom-italia"}, // Telecom Italia measurability experiments
	{0xf123f0c0, 0xfffffff0, "mozquic"},        // Mozilla MozQuic
	{0x91c17000, 0xffffff00, "quicly"},         // quicly (H2O)
	{0x50435130, 0xfffffff0, "picoquic"},       // "PCQ0".. picoquic internal
	{0x45474700, 0xffffff00, "quant"},          // "EGG"+x NetApp quant
	{0x51474f00, 0xffffff00, "quic-go-exp"},    // "QGO"+x quic-go experiments
	{0x50524f58, 0xffffffff, "prox"},           // "PROX" proxied QUIC
}

// Name returns a short human name for v: "v1", "v2", "draft-29", "grease", "Q050",
// "T051", "mvfst", or "0x%08x" for unknown values.
func Name(v uint32) string {
	switch v {
	case Negotiation:
		return "negotiation"
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	if IsGrease(v) {
		return "grease"
	}
	if n, ok := IsDraft(v); ok {
		return fmt.Sprintf("draft-%d", n)
	}
	if tag, ok := googleTag(v); ok {
		return tag
	}
	for _, vd := range vendors {
		if v&vd.mask == vd.value {
			return vd.name
		}
	}
	return fmt.Sprintf("0x%08x", v)
}

// FamilyOf returns the family of v for grouping in figures.
func FamilyOf(v uint32) Family {
	switch {
	case v == V1 || v == V2:
		return FamilyIETF
	case IsGrease(v):
		return FamilyGrease
	case v == Negotiation || v == ProbeAllOnes:
		return FamilyReserved
	}
	if _, ok := IsDraft(v); ok {
		return FamilyDraft
	}
	if _, ok := googleTag(v); ok {
		return FamilyGoogle
	}
	for _, vd := range vendors {
		if v&vd.mask == vd.value {
			return FamilyVendor
		}
	}
	return FamilyUnknown
}

// googleTag recognises Google QUIC versions: four ASCII bytes 'Q' or 'T' followed by
// three digits (Q043, Q046, Q050, T050, T051; Google's gQUIC wire spec).
func googleTag(v uint32) (string, bool) {
	b := [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	if b[0] != 'Q' && b[0] != 'T' {
		return "", false
	}
	for _, c := range b[1:] {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return string(b[:]), true
}

// Parse reads a version given as a name ("v1", "v2", "draft-29", "Q050") or a number
// ("0x1a2a3a4a", "1", "4294967295").
func Parse(s string) (uint32, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "v1", "1":
		return V1, nil
	case "v2":
		return V2, nil
	case "grease", "reserved":
		return ProbeGrease, nil
	case "all-ones", "ffffffff", "0xffffffff":
		return ProbeAllOnes, nil
	case "0", "0x0", "0x00000000", "negotiation":
		return Negotiation, nil
	}
	if n, ok := strings.CutPrefix(strings.ToLower(s), "draft-"); ok {
		var d int
		if _, err := fmt.Sscanf(n, "%d", &d); err != nil || d < 0 || d > 255 {
			return 0, fmt.Errorf("quic version %q: bad draft number", s)
		}
		return 0xff000000 | uint32(d), nil
	}
	if len(s) == 4 && (s[0] == 'Q' || s[0] == 'T') {
		v := uint32(s[0])<<24 | uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3])
		if _, ok := googleTag(v); ok {
			return v, nil
		}
	}
	var v uint64
	var err error
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		_, err = fmt.Sscanf(h, "%x", &v)
		if len(h) > 8 {
			err = fmt.Errorf("more than 32 bits")
		}
	} else {
		_, err = fmt.Sscanf(s, "%d", &v)
	}
	if err != nil || v > 0xffffffff {
		return 0, fmt.Errorf("quic version %q: want a name (v1, v2, draft-29, Q050) or a 32-bit number", s)
	}
	return uint32(v), nil
}

// Names returns Name of every version, in order.
func Names(vs []uint32) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = Name(v)
	}
	return out
}
