package optout

import (
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/net/idna"
)

// What an operator reads from a request (optout list, the audit, the comments of
// optout.conf, a review mail) must read as what it is. An email address is therefore
// kept in ASCII: its local part is printable ASCII, and its domain passes IDNA2008
// (the registration profile of golang.org/x/net/idna: valid code points, hyphens, the
// bidi rule) with every label in one script, then is stored as its ASCII form (A-labels,
// xn--...), so that no homoglyph (a Cyrillic "а" in "exаmple.net") or bidi override
// ("d\u202e@example.net") reaches the operator. Free text (the note, a reason) may be in
// any script but holds no control character other than line breaks and tabs, no bidi
// control, no other invisible format character but the joiners scripts need, no line or
// paragraph separator and no private-use character.

// idnaProfile checks and converts a domain for registration-strength use.
var idnaProfile = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.ValidateLabels(true),
	idna.StrictDomainName(true), idna.CheckHyphens(true), idna.CheckJoiners(true), idna.Transitional(false))

// asciiEmail checks an email address (already parsed as one addr-spec) and returns it
// with its domain in ASCII (IDNA A-labels); a *FieldError of field "email" says why not.
func asciiEmail(email string) (string, error) {
	at := strings.LastIndexByte(email, '@')
	local, domain := email[:at], email[at+1:]
	for _, r := range local {
		if r <= ' ' || r > '~' {
			return "", &FieldError{"email", fmt.Sprintf("the part before @ may only hold ASCII letters, digits and punctuation, not %s", describe(r))}
		}
	}
	for _, r := range domain {
		if bad := unsafeRune(r, false); bad != "" {
			return "", &FieldError{"email", "the domain holds " + bad}
		}
	}
	for _, label := range strings.Split(domain, ".") {
		if s := labelScripts(label); mixedScripts(s) {
			return "", &FieldError{"email", fmt.Sprintf("the domain label %q mixes the scripts %s (letters that look alike): write it in one script", label, strings.Join(s, " and "))}
		}
	}
	a, err := idnaProfile.ToASCII(domain)
	if err != nil {
		return "", &FieldError{"email", "the domain is not a valid (internationalised) domain name"}
	}
	if !strings.Contains(a, ".") {
		return "", &FieldError{"email", "not an email address (e.g. noc@example.net)"}
	}
	return local + "@" + strings.ToLower(a), nil
}

// CheckText refuses free text (field names the form field or flag) that holds what an
// operator cannot read safely (see unsafeRune): a *FieldError. Line breaks and tabs are
// allowed when multiline.
func CheckText(field, s string, multiline bool) error {
	for _, r := range s {
		if bad := unsafeRune(r, multiline); bad != "" {
			return &FieldError{field, "the text holds " + bad + "; plain, visible text only"}
		}
	}
	return nil
}

// unsafeRune says what r is if an operator cannot read it safely, else "".
func unsafeRune(r rune, multiline bool) string {
	switch {
	case multiline && (r == '\n' || r == '\r' || r == '\t'):
		return ""
	case unicode.IsControl(r):
		return "a control character (" + describe(r) + ")"
	case isBidiControl(r):
		return "a bidi control character (" + describe(r) + ") that reorders what is shown"
	case r == '\u200c' || r == '\u200d': // the joiners (ZWNJ, ZWJ) that Persian, Indic scripts and emoji need
		return ""
	case unicode.Is(unicode.Cf, r):
		return "an invisible format character (" + describe(r) + ")"
	case unicode.In(r, unicode.Zl, unicode.Zp):
		return "a line or paragraph separator (" + describe(r) + ")"
	case unicode.Is(unicode.Co, r) || r == '\ufffd' || r&0xfffe == 0xfffe:
		return "a character that is no text (" + describe(r) + ")"
	}
	return ""
}

// isBidiControl reports the bidirectional formatting characters (Unicode's
// Bidi_Control property): marks, embeddings, overrides and isolates.
func isBidiControl(r rune) bool {
	return unicode.Is(unicode.Bidi_Control, r)
}

func describe(r rune) string { return fmt.Sprintf("U+%04X", r) }

// labelScripts lists the scripts of a label's letters (Common and Inherited, which go
// with any script, left out), in a stable order.
func labelScripts(label string) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range label {
		if !unicode.IsLetter(r) && !unicode.IsMark(r) && !unicode.IsNumber(r) {
			continue
		}
		name := scriptOf(r)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, name)
	}
	return out
}

// oneWritingSystem are the sets of scripts one label may mix because one language
// writes with them together (Unicode UTS #39, "Highly Restrictive"): Japanese, Korean,
// Chinese with Bopomofo.
var oneWritingSystem = []map[string]bool{
	{"Han": true, "Hiragana": true, "Katakana": true},
	{"Han": true, "Hangul": true},
	{"Han": true, "Bopomofo": true},
}

// mixedScripts says whether a label's scripts mix what one writing system does not.
func mixedScripts(scripts []string) bool {
	if len(scripts) < 2 {
		return false
	}
	for _, w := range oneWritingSystem {
		all := true
		for _, s := range scripts {
			all = all && w[s]
		}
		if all {
			return false
		}
	}
	return true
}

// scriptOf is r's Unicode script ("" for Common, Inherited and unassigned).
func scriptOf(r rune) string {
	if r < 0x80 {
		if unicode.IsLetter(r) {
			return "Latin"
		}
		return ""
	}
	for name, t := range unicode.Scripts {
		if name == "Common" || name == "Inherited" {
			continue
		}
		if unicode.Is(t, r) {
			return name
		}
	}
	return ""
}
