// Package optout is the opt-out web page served from the scanner's address: who scans,
// why, what is stored, and a form through which an operator excludes an address or
// prefix from every later scan. Accepted requests go into optout_requests and, written
// atomically, into a zmap-format file under blocklist/.
package optout

import (
	"errors"
	"fmt"
	"net/mail"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// Field limits.
const (
	MaxRangeLen = 64   // bytes of the range field, surrounding spaces trimmed
	MaxEmailLen = 254  // bytes: RFC 5321 §4.5.3.1.3 path limit, as the schema's CHECK
	MaxNoteLen  = 2000 // characters (code points), as the schema's CHECK
)

// MaxBodySize is the largest valid form, URL-encoded (application/x-www-form-urlencoded,
// as browsers and url.Values send it): every byte of a field is at most 3 bytes encoded
// ("%XX"), a character at most utf8.UTFMax bytes, so 2,000 characters of a 4-byte script
// in the note fit. 5+64 + 7+3*64 + 7+3*254 + 6+3*4*2000 = 25,043 bytes; a larger body is
// refused with 413 before it is parsed.
const MaxBodySize = len("csrf=") + csrfTokenLen +
	len("&range=") + 3*MaxRangeLen +
	len("&email=") + 3*MaxEmailLen +
	len("&note=") + 3*utf8.UTFMax*MaxNoteLen

// Limits bound how much address space one request may exclude.
type Limits struct {
	MinBitsV4 int // shortest IPv4 prefix accepted (e.g. 16: at most a /16)
	MinBitsV6 int // shortest IPv6 prefix accepted (e.g. 32)
}

// DefaultLimits accepts up to a /16 (IPv4) or a /32 (IPv6) per request; larger
// exclusions go through the contact address, by hand.
var DefaultLimits = Limits{MinBitsV4: 16, MinBitsV6: 32}

// Request is a validated opt-out.
type Request struct {
	Prefix netip.Prefix
	Email  string
	Note   string
}

// FieldError says which field is wrong and why, in words for the form.
type FieldError struct {
	Field, Msg string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// ParsePrefix accepts an IPv4/IPv6 address or CIDR prefix and returns it masked.
func ParsePrefix(s string, lim Limits) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Prefix{}, &FieldError{"range", "enter an IPv4 or IPv6 address or prefix, e.g. 192.0.2.0/24"}
	}
	if len(s) > MaxRangeLen {
		return netip.Prefix{}, &FieldError{"range", "not an IP address or prefix"}
	}
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		p, err = netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, &FieldError{"range", "not an IP address or prefix (e.g. 192.0.2.0/24 or 2001:db8::/48)"}
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, &FieldError{"range", "not an IP address or prefix (e.g. 192.0.2.7 or 192.0.2.0/24)"}
		}
		if a.Zone() != "" {
			return netip.Prefix{}, &FieldError{"range", "zoned addresses are not accepted"}
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if !p.IsValid() || p.Addr().Zone() != "" {
		return netip.Prefix{}, &FieldError{"range", "zoned addresses are not accepted"}
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		if p.Bits() < 0 {
			return netip.Prefix{}, &FieldError{"range", "not an IP address or prefix"}
		}
	}
	min := lim.MinBitsV4
	if p.Addr().Is6() {
		min = lim.MinBitsV6
	}
	if p.Bits() < min {
		return netip.Prefix{}, &FieldError{"range", fmt.Sprintf(
			"prefix too large: at most a /%d can be excluded through this form; write to the contact address for more", min)}
	}
	return p.Masked(), nil
}

// Validate checks the three form fields.
func Validate(rangeField, email, note string, lim Limits) (Request, error) {
	p, err := ParsePrefix(rangeField, lim)
	if err != nil {
		return Request{}, err
	}
	email = strings.TrimSpace(email)
	if email == "" || len(email) > MaxEmailLen || !utf8.ValidString(email) {
		return Request{}, &FieldError{"email", "enter a contact email address (at most 254 characters)"}
	}
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email || addr.Name != "" || !strings.Contains(email[strings.LastIndex(email, "@")+1:], ".") {
		return Request{}, &FieldError{"email", "not an email address (e.g. noc@example.net)"}
	}
	if hasMarkup(email) {
		return Request{}, &FieldError{"email", "HTML is not accepted"}
	}
	if email, err = asciiEmail(email); err != nil {
		return Request{}, err
	}
	if len(email) > MaxEmailLen {
		return Request{}, &FieldError{"email", "enter a contact email address (at most 254 characters, the domain in ASCII)"}
	}
	note = strings.TrimSpace(note)
	if !utf8.ValidString(note) {
		return Request{}, &FieldError{"note", "the note is not valid UTF-8 text"}
	}
	if utf8.RuneCountInString(note) > MaxNoteLen {
		return Request{}, &FieldError{"note", fmt.Sprintf("the note is longer than %d characters", MaxNoteLen)}
	}
	if hasMarkup(note) {
		return Request{}, &FieldError{"note", "HTML or script is not accepted in the note; plain text only"}
	}
	if err := CheckText("note", note, true); err != nil {
		return Request{}, err
	}
	return Request{Prefix: p, Email: email, Note: note}, nil
}

// hasMarkup refuses anything that looks like HTML or a script: the page escapes all
// output anyway, but the blocklist file and the database should hold plain text only.
func hasMarkup(s string) bool {
	l := strings.ToLower(s)
	return strings.ContainsAny(s, "<>") || strings.Contains(l, "javascript:") || strings.Contains(l, "&#")
}

// ErrRateLimited is returned when a source sends too many requests.
var ErrRateLimited = errors.New("too many requests from your address; try again in a minute")
