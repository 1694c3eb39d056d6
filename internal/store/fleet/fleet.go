// Package fleet sets up one central PostgreSQL database for several vantage points: a
// private certificate authority, the server's certificate, and per vantage point a
// database role (store.AddVantageRole) with a client certificate whose common name is
// that role, so the server authenticates it by certificate (pg_hba "hostssl ... cert")
// and the vantage point verifies the server (sslmode=verify-full). docs/fleet.md.
package fleet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Files of a fleet directory.
const (
	CACert     = "ca.crt"
	CAKey      = "ca.key"
	ServerCert = "server.crt"
	ServerKey  = "server.key"
	// ClientDir holds one directory per vantage point: client.crt, client.key, ca.crt.
	ClientDir = "vantages"
)

// validity of every certificate issued here.
const validity = 5 * 365 * 24 * time.Hour

// ErrExists says a fleet directory already holds a CA (init does not overwrite one).
var ErrExists = errors.New("fleet directory already has a CA")

// Init creates a CA and a server certificate for names (DNS names or IP addresses, the
// addresses vantage points connect to) in dir. It refuses a dir that has a CA already.
func Init(dir string, names []string) error {
	if len(names) == 0 {
		return errors.New("fleet-init: the server needs at least one name or address")
	}
	if _, err := os.Stat(filepath.Join(dir, CAKey)); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "doqscan fleet CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, CACert), "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, CAKey), caKey); err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srv := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			srv.IPAddresses = append(srv.IPAddresses, ip)
		} else {
			srv.DNSNames = append(srv.DNSNames, n)
		}
	}
	return issue(dir, ServerCert, ServerKey, srv, caCert, caKey)
}

// Client is a vantage point's credentials in a fleet directory.
type Client struct {
	Dir  string // <fleet>/vantages/<id>
	Role string
}

// Cert, Key and CA are the paths of the client certificate, its key and the CA.
func (c Client) Cert() string { return filepath.Join(c.Dir, "client.crt") }
func (c Client) Key() string  { return filepath.Join(c.Dir, "client.key") }
func (c Client) CA() string   { return filepath.Join(c.Dir, CACert) }

// URL is the DATABASE_URL of the vantage point: TLS with the server verified against
// the fleet's CA and its name (sslmode=verify-full), the client certificate as its login.
func (c Client) URL(host string, port int, dbname string) string {
	q := url.Values{}
	q.Set("sslmode", "verify-full")
	q.Set("sslrootcert", c.CA())
	q.Set("sslcert", c.Cert())
	q.Set("sslkey", c.Key())
	u := url.URL{Scheme: "postgres", User: url.User(c.Role), Host: net.JoinHostPort(host, fmt.Sprint(port)),
		Path: "/" + dbname, RawQuery: q.Encode()}
	return u.String()
}

// IssueClient writes a client certificate for role (common name = role) signed by dir's
// CA, with the CA beside it, under dir/vantages/<vantage>.
func IssueClient(dir, vantage, role string) (Client, error) {
	caCert, caKey, err := loadCA(dir)
	if err != nil {
		return Client{}, err
	}
	c := Client{Dir: filepath.Join(dir, ClientDir, vantage), Role: role}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return c, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: role},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(c.Dir, "client.crt", "client.key", tmpl, caCert, caKey); err != nil {
		return c, err
	}
	ca, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return c, err
	}
	return c, os.WriteFile(c.CA(), ca, 0o644)
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, nil, fmt.Errorf("fleet CA (run dbctl fleet-init first): %w", err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, CAKey))
	if err != nil {
		return nil, nil, fmt.Errorf("fleet CA key: %w", err)
	}
	cp, _ := pem.Decode(cb)
	kp, _ := pem.Decode(kb)
	if cp == nil || kp == nil {
		return nil, nil, fmt.Errorf("fleet CA in %s: not PEM", dir)
	}
	cert, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kp.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func issue(dir, certName, keyName string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, certName), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, keyName), key)
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
