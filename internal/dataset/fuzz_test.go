package dataset

import (
	"bytes"
	"io"
	"testing"
	"unicode/utf8"
)

// The importer's byte parsers never panic; what they accept satisfies their promises.

func FuzzParseAddrList(f *testing.F) {
	f.Add([]byte("0.0.0.0\n192.0.2.1\n192.0.2.1\n\n2001:db8::1\n"))
	f.Add([]byte("1.2.3.999\n"))
	f.Add([]byte("::ffff:192.0.2.1\r\n fe80::1%eth0 \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, le := parseAddrList(bytes.NewReader(b))
		if failed(t, le, 1) {
			return
		}
		seen := map[string]bool{}
		for _, a := range l.Addrs {
			if !a.IsValid() || a == unspecified || a.Is4In6() || seen[a.String()] {
				t.Fatalf("accepted %v", a)
			}
			seen[a.String()] = true
		}
		if len(l.Addrs)+l.Dropped+l.Dups != l.Lines {
			t.Fatalf("lines %d != %d kept + %d dropped + %d repeated", l.Lines, len(l.Addrs), l.Dropped, l.Dups)
		}
	})
}

func FuzzParseCertCSV(f *testing.F) {
	f.Add([]byte(`94.140.14.141,tls,853,"{""Version"":3,""CommonName"":""dns.adguard.com"",""Organization"":[""Adguard""],""DNSNames"":[""dns.adguard.com""],""AuthorityID"":""CrwIKReMpTlteg7OM8cus+37w3o="",""SubjectID"":""ngZs4oW7UtJn7ZY3bSQ5N+jA1z8="",""Size"":1345,""PublicKeyAlgorithm"":""ECDSA"",""SignatureAlgorithm"":""ECDSA-SHA384"",""CertHash"":""5d9f301af2e461a008d58b3303d5181c""}"` + "\n"))
	f.Add([]byte("1.2.3.4,quic,784,\"{}\"\n1.2.3.4,quic,70000,\"{}\"\n"))
	f.Add([]byte("1.2.3.4,ftp,21,\"{\"\n"))
	fuzzRecords(f, parseCertCSV, func(r certRecord) bool {
		return certProtocols[r.Protocol] && r.Addr.IsValid() && r.Port >= 0 && r.Port <= 65535 &&
			(r.MD5 == nil || len(r.MD5) == 16) && r.Info.Size >= 0
	})
}

func FuzzParseLocationCSV(f *testing.F) {
	h := "country,countryCode,region,regionName,city,zip,lat,lon,org,as,ip\n"
	f.Add([]byte(h + `Hong Kong,HK,HCW,Central,Hong Kong,999077,22.273,114.1498,Hong Kong,"AS45102 Alibaba (US) Technology Co., Ltd.",8.210.110.44` + "\n"))
	f.Add([]byte(h + ",,,,,,,,,,192.0.2.1\n"))
	f.Add([]byte("ip\n1.2.3.4\n"))
	fuzzRecords(f, parseLocationCSV, func(l locationRecord) bool {
		return !(!l.Addr.IsValid() || (l.Country != "" && !reCountry.MatchString(l.Country)) ||
			(l.Lat != nil && (*l.Lat < -90 || *l.Lat > 90)) || (l.Lon != nil && (*l.Lon < -180 || *l.Lon > 180)) ||
			(l.ASN != nil && (*l.ASN < 0 || *l.ASN > 1<<32-1)))
	})
}

// fuzzRecords fuzzes a CSV parser: an error has a line (0: before the first) and a
// cause; every record it accepts satisfies valid.
func fuzzRecords[T any](f *testing.F, parse func(io.Reader) ([]T, *lineError), valid func(T) bool) {
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, le := parse(bytes.NewReader(b))
		if failed(t, le, 0) {
			return
		}
		for _, r := range recs {
			if !valid(r) {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}

// failed reports whether a parser returned an error, which must have a cause and a line
// from first on (0: the error may come before the first line).
func failed(t *testing.T, le *lineError, first int) bool {
	t.Helper()
	if le == nil {
		return false
	}
	if le.Line < first || le.Err == nil {
		t.Fatalf("bad error (want a cause and a line from %d): %+v", first, le)
	}
	return true
}

// FuzzCheckText: a text file passes exactly when it is UTF-8 without NUL and ends its
// last line; a refusal names a line of the file.
func FuzzCheckText(f *testing.F) {
	for _, s := range []string{"", "a\n", "a", "a\nb", "M\xfcnchen\n", "x\x00y\n", "\ufeffh\n", "ok\n\xed\xa0\x80\n", "178.79.168.1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		le := checkText(b)
		ok := utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 && (len(b) == 0 || b[len(b)-1] == '\n')
		if (le == nil) != ok {
			t.Fatalf("checkText(%q) = %v, want ok %v", b, le, ok)
		}
		if le != nil && (le.Line < 1 || le.Line > bytes.Count(b, []byte("\n"))+1) {
			t.Fatalf("checkText(%q): line %d", b, le.Line)
		}
	})
}
