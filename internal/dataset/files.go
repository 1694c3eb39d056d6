package dataset

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// FileError is a malformed input file: which file (relative to the imported directory),
// which line (or SQLite table and row), and what is wrong. An import that meets one
// writes nothing.
type FileError struct {
	Path  string
	Line  int    // 1-based line; 0 when Where says where
	Where string // e.g. "table q_versions, id 7"
	Err   error
}

func (e *FileError) Error() string {
	switch {
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %v", e.Path, e.Line, e.Err)
	case e.Where != "":
		return fmt.Sprintf("%s (%s): %v", e.Path, e.Where, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// ErrMalformed is wrapped by every FileError's Err for errors.Is.
var ErrMalformed = errors.New("malformed")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// The file names of the study's pipeline (dns-analysis results/):
//
//	DD-MM-YYYY-<port>.csv             ZMap's list of addresses that answered on <port>
//	DD-MM-YYYY-combined.csv           the union of the 784 and 8853 lists
//	DD-MM-YYYY-verified.csv           the verifier's list (784 then 8853; port not recorded)
//	DD-MM-YYYY-<port>-verified.csv    the verifier's list for <port>
//	DD-MM-YYYY-final.db               misc SQLite (versions, certificates, TFO, ...)
var (
	reZmapList      = regexp.MustCompile(`^([0-9]{2}-[0-9]{2}-[0-9]{4})-([0-9]{1,5})\.csv$`)
	reUnion         = regexp.MustCompile(`^([0-9]{2}-[0-9]{2}-[0-9]{4})-combined\.csv$`)
	reVerified      = regexp.MustCompile(`^([0-9]{2}-[0-9]{2}-[0-9]{4})(?:-([0-9]{1,5}))?-verified\.csv$`)
	reDate          = regexp.MustCompile(`([0-9]{2}-[0-9]{2}-[0-9]{4})`)
	reCertCSV       = regexp.MustCompile(`^certs.*\.csv$`)
	reLocationCSV   = regexp.MustCompile(`^ip-location.*\.csv$`)
	reSQLite        = regexp.MustCompile(`\.(db|sqlite|sqlite3)$`)
	reSQLiteSidecar = regexp.MustCompile(`\.(db|sqlite|sqlite3)-(wal|shm|journal)$`)
)

// fileDate parses the DD-MM-YYYY of the study's file names (the scan's day, UTC midnight).
func fileDate(s string) (time.Time, error) {
	t, err := time.Parse("02-01-2006", s)
	if err != nil {
		return time.Time{}, malformed("bad date %q in the file name", s)
	}
	return t.UTC(), nil
}

// unspecified is the spurious line every ZMap list of the study holds (0.0.0.0).
var unspecified = netip.IPv4Unspecified()

// addrList is a parsed one-address-per-line file.
type addrList struct {
	Addrs   []netip.Addr // in file order, duplicates and 0.0.0.0 dropped
	Lines   int          // non-empty lines read
	Dropped int          // 0.0.0.0 lines
	Dups    int          // repeated addresses
}

// parseAddrList reads one IP address per line (no header; blank lines and surrounding
// spaces ignored; 0.0.0.0 dropped). A line that is not an address is an error naming
// its line number.
func parseAddrList(r io.Reader) (addrList, *lineError) {
	var out addrList
	seen := map[netip.Addr]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		out.Lines++
		a, err := netip.ParseAddr(line)
		if err != nil || a.Zone() != "" {
			return out, &lineError{n, malformed("not an IP address: %q", clip(line))}
		}
		a = a.Unmap()
		if a == unspecified {
			out.Dropped++
			continue
		}
		if seen[a] {
			out.Dups++
			continue
		}
		seen[a] = true
		out.Addrs = append(out.Addrs, a)
	}
	if err := sc.Err(); err != nil {
		return out, &lineError{n + 1, malformed("%v", err)}
	}
	return out, nil
}

// lineError is a parse error at a line of the file being read.
type lineError struct {
	Line int
	Err  error
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// CertInfo is the JSON object in the fourth column of the study's certificate CSVs
// (the leaf certificate as the study's tool summarised it).
type CertInfo struct {
	Version            int      `json:"Version"`
	CommonName         string   `json:"CommonName"`
	Organization       []string `json:"Organization"`
	DNSNames           []string `json:"DNSNames"`
	AuthorityID        string   `json:"AuthorityID"` // base64
	SubjectID          string   `json:"SubjectID"`   // base64
	Size               int      `json:"Size"`        // DER bytes
	PublicKeyAlgorithm string   `json:"PublicKeyAlgorithm"`
	SignatureAlgorithm string   `json:"SignatureAlgorithm"`
	CertHash           string   `json:"CertHash"` // MD5 of the DER, hex
}

// checkText refuses a name the JSON held that is not faithful text (checkString): a NUL
// or a lone surrogate escape, which the decoder turned into U+FFFD. raw is the JSON.
func (ci *CertInfo) checkText(raw string) error {
	replaced := strings.Count(raw, "\ufffd") + strings.Count(strings.ToLower(raw), `\ufffd`)
	for _, s := range append([]string{ci.CommonName, ci.AuthorityID, ci.SubjectID, ci.PublicKeyAlgorithm,
		ci.SignatureAlgorithm, ci.CertHash}, append(ci.Organization, ci.DNSNames...)...) {
		if err := checkString(s, replaced); err != nil {
			return err
		}
	}
	return nil
}

// certRecord is one line of a certificate CSV.
type certRecord struct {
	Addr         netip.Addr
	Protocol     string // tls | https | quic
	Port         int32
	Info         CertInfo
	MD5          []byte
	AuthorityKey []byte
	SubjectKey   []byte
}

var certProtocols = map[string]bool{"tls": true, "https": true, "quic": true}

// parseCertCSV reads the study's certificate CSV: no header; columns ip, protocol
// (tls|https|quic), port, info (JSON).
func parseCertCSV(r io.Reader) ([]certRecord, *lineError) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	return readCSV(cr, func(line int, rec []string) (certRecord, *lineError) {
		var c certRecord
		if len(rec) != 4 {
			return c, &lineError{line, malformed("want 4 columns (ip, protocol, port, info), found %d", len(rec))}
		}
		var err error
		if c.Addr, err = netip.ParseAddr(strings.TrimSpace(rec[0])); err != nil || c.Addr.Zone() != "" {
			return c, &lineError{line, malformed("column 1: not an IP address: %q", clip(rec[0]))}
		}
		c.Addr = c.Addr.Unmap()
		c.Protocol = strings.TrimSpace(rec[1])
		if !certProtocols[c.Protocol] {
			return c, &lineError{line, malformed("column 2: protocol %q, want tls, https or quic", clip(rec[1]))}
		}
		p, err := strconv.ParseUint(strings.TrimSpace(rec[2]), 10, 16)
		if err != nil {
			return c, &lineError{line, malformed("column 3: port %q", clip(rec[2]))}
		}
		c.Port = int32(p)
		dec := json.NewDecoder(bytes.NewReader([]byte(rec[3])))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c.Info); err != nil {
			return c, &lineError{line, malformed("column 4: certificate info: %v", err)}
		}
		if dec.More() {
			return c, &lineError{line, malformed("column 4: text after the JSON object")}
		}
		if err := c.Info.checkText(rec[3]); err != nil {
			return c, &lineError{line, fmt.Errorf("%w: column 4: %w", ErrMalformed, err)}
		}
		if c.Info.CertHash != "" {
			if c.MD5, err = hex.DecodeString(c.Info.CertHash); err != nil || len(c.MD5) != 16 {
				return c, &lineError{line, malformed("CertHash %q is not an MD5 in hex", clip(c.Info.CertHash))}
			}
		}
		if c.AuthorityKey, err = b64(c.Info.AuthorityID); err != nil {
			return c, &lineError{line, malformed("AuthorityID: %v", err)}
		}
		if c.SubjectKey, err = b64(c.Info.SubjectID); err != nil {
			return c, &lineError{line, malformed("SubjectID: %v", err)}
		}
		if c.Info.Size < 0 {
			return c, &lineError{line, malformed("Size %d", c.Info.Size)}
		}
		return c, nil
	})
}

// readCSV parses every record of cr with parse (given the record's line), up to the end
// of the input; at the first error it returns the records parsed before it.
func readCSV[T any](cr *csv.Reader, parse func(line int, rec []string) (T, *lineError)) ([]T, *lineError) {
	var out []T
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, csvError(err)
		}
		line, _ := cr.FieldPos(0) // only valid after a successful Read
		v, le := parse(line, rec)
		if le != nil {
			return out, le
		}
		out = append(out, v)
	}
}

// csvError turns encoding/csv's error into a line error.
func csvError(err error) *lineError {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &lineError{pe.StartLine, malformed("%v", pe.Err)}
	}
	return &lineError{0, malformed("%v", err)}
}

func b64(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	return base64.StdEncoding.DecodeString(s)
}

// locationRecord is one line of the study's ip-location CSV (a web API's answer).
type locationRecord struct {
	Addr     netip.Addr
	Country  string // ISO 3166-1 alpha-2 ("" when unknown)
	City     string
	Lat, Lon *float64
	ASN      *int64
	ASOrg    string
	Org      string
}

// locationColumns are the header the file must have (order free, extra columns ignored).
var locationColumns = []string{"countryCode", "city", "lat", "lon", "org", "as", "ip"}

var reAS = regexp.MustCompile(`^AS([0-9]{1,10})(?:\s+(.*))?$`)

// parseLocationCSV reads the study's ip-location.csv (header country, countryCode,
// region, regionName, city, zip, lat, lon, org, as, ip).
func parseLocationCSV(r io.Reader) ([]locationRecord, *lineError) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 0
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &lineError{1, malformed("empty file, want a header")}
		}
		return nil, &lineError{1, malformed("header: %v", err)}
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, c := range locationColumns {
		if _, ok := col[c]; !ok {
			return nil, &lineError{1, malformed("header lacks column %q (want %s)", c, strings.Join(locationColumns, ","))}
		}
	}
	return readCSV(cr, func(line int, rec []string) (locationRecord, *lineError) {
		var l locationRecord
		var err error
		if l.Addr, err = netip.ParseAddr(strings.TrimSpace(rec[col["ip"]])); err != nil || l.Addr.Zone() != "" {
			return l, &lineError{line, malformed("ip: not an IP address: %q", clip(rec[col["ip"]]))}
		}
		l.Addr = l.Addr.Unmap()
		l.Country = strings.ToUpper(strings.TrimSpace(rec[col["countryCode"]]))
		if l.Country != "" && !reCountry.MatchString(l.Country) {
			return l, &lineError{line, malformed("countryCode %q is not two letters", clip(l.Country))}
		}
		l.City = strings.TrimSpace(rec[col["city"]])
		l.Org = strings.TrimSpace(rec[col["org"]])
		for _, f := range []struct {
			name string
			dst  **float64
			max  float64
		}{{"lat", &l.Lat, 90}, {"lon", &l.Lon, 180}} {
			s := strings.TrimSpace(rec[col[f.name]])
			if s == "" {
				continue
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || v < -f.max || v > f.max {
				return l, &lineError{line, malformed("%s %q", f.name, clip(s))}
			}
			*f.dst = &v
		}
		if as := strings.TrimSpace(rec[col["as"]]); as != "" {
			m := reAS.FindStringSubmatch(as)
			if m == nil {
				return l, &lineError{line, malformed("as %q, want \"AS<number> <name>\"", clip(as))}
			}
			n, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil || n > 1<<32-1 {
				return l, &lineError{line, malformed("as %q: number out of range", clip(as))}
			}
			l.ASN, l.ASOrg = &n, strings.TrimSpace(m[2])
		}
		return l, nil
	})
}

var reCountry = regexp.MustCompile(`^[A-Z]{2}$`)
