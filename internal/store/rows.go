package store

import (
	"net/netip"
	"time"
)

// Table names, one per row type below.
const (
	TableScanReplies         = "scan_replies"
	TableCertificates        = "certificates"
	TableVerificationResults = "verification_results"
	TableResolvers           = "resolvers"
	TableResolverGeo         = "resolver_geo"
	TableQlogs               = "qlogs"
	TableMeasurements        = "measurements"
	TableRTTSamples          = "rtt_samples"
	TableHandshakeAnalyses   = "handshake_analyses"
	TableResolverFeatures    = "resolver_features"
	TableOptOutRequests      = "optout_requests"
)

// ScanReply is one classified reply of a scan (natural key: scan, port, address).
type ScanReply struct {
	ScanID       int64      `db:"scan_id"`
	Port         int32      `db:"port"`
	Address      netip.Addr `db:"address"`
	Sport        *int32     `db:"sport"`
	ReplyKind    string     `db:"reply_kind"`
	QUICVersions []int64    `db:"quic_versions"`
	GreaseCount  *int16     `db:"grease_count"`
	VNCIDMatch   *bool      `db:"vn_cid_match"`
	DNSRcode     *int16     `db:"dns_rcode"`
	DNSAnswers   *int16     `db:"dns_answers"`
	DNSRA        *bool      `db:"dns_ra"`
	ICMPType     *int16     `db:"icmp_type"`
	ICMPCode     *int16     `db:"icmp_code"`
	PayloadLen   *int32     `db:"payload_len"`
	Payload      []byte     `db:"payload"`
	ReceivedAt   time.Time  `db:"received_at"`
	ISOWeek      string     `db:"iso_week"` // the scan's week: the partition key (migration 0012)
}

// Certificate is one X.509 certificate, keyed by the SHA-256 of its DER.
type Certificate struct {
	SHA256       []byte     `db:"sha256"`
	DER          []byte     `db:"der"`
	Subject      string     `db:"subject"`
	SubjectCN    string     `db:"subject_cn"`
	SANs         []string   `db:"sans"`
	Issuer       string     `db:"issuer"`
	IssuerCN     string     `db:"issuer_cn"`
	Serial       string     `db:"serial"`
	NotBefore    *time.Time `db:"not_before"`
	NotAfter     *time.Time `db:"not_after"`
	KeyType      string     `db:"key_type"`
	KeyBits      *int32     `db:"key_bits"`
	SignatureAlg string     `db:"signature_alg"`
	IsCA         bool       `db:"is_ca"`
	SelfSigned   bool       `db:"self_signed"`
	FirstSeen    time.Time  `db:"first_seen"`
}

// VerificationResult is the outcome of verifying one (address, port) in a run.
type VerificationResult struct {
	RunID           int64      `db:"run_id"`
	Address         netip.Addr `db:"address"`
	Port            int32      `db:"port"`
	Outcome         string     `db:"outcome"`
	Detail          string     `db:"detail"`
	QUICVersion     *int64     `db:"quic_version"`
	ALPN            *string    `db:"alpn"`
	TLSVersion      *int32     `db:"tls_version"`
	TLSCipher       *string    `db:"tls_cipher"`
	HandshakeNS     *int64     `db:"handshake_ns"`
	SNI             *string    `db:"sni"`
	SNISource       *string    `db:"sni_source"`
	CertValidForSNI *bool      `db:"cert_valid_for_sni"`
	CertChain       [][]byte   `db:"cert_chain"`
	ScanVersions    []int64    `db:"scan_versions"`
	DNSRcode        *int16     `db:"dns_rcode"`
	DNSAnswers      *int16     `db:"dns_answers"`
	Attempts        int16      `db:"attempts"`
	VerifiedAt      time.Time  `db:"verified_at"`
}

// Resolver is an address seen as a DoQ resolver.
type Resolver struct {
	Address   netip.Addr `db:"address"`
	FirstSeen time.Time  `db:"first_seen"`
	LastSeen  time.Time  `db:"last_seen"`
}

// ResolverGeo is where a resolver is, according to one pair of GeoIP databases.
type ResolverGeo struct {
	Address     netip.Addr `db:"address"`
	CityDataset int64      `db:"city_dataset"`
	ASNDataset  int64      `db:"asn_dataset"`
	ASN         *int64     `db:"asn"`
	ASOrg       *string    `db:"as_org"`
	Country     *string    `db:"country"`
	Continent   *string    `db:"continent"`
	City        *string    `db:"city"`
	Latitude    *float64   `db:"latitude"`
	Longitude   *float64   `db:"longitude"`
}

// Qlog is the compressed qlog of one QUIC connection.
type Qlog struct {
	QlogID     [16]byte   `db:"qlog_id"`
	CampaignID int64      `db:"campaign_id"`
	Address    netip.Addr `db:"address"`
	Port       int32      `db:"port"`
	ODCID      []byte     `db:"odcid"`
	Encoding   string     `db:"encoding"`
	Format     string     `db:"format"`
	RawSize    int32      `db:"raw_size"`
	Data       []byte     `db:"data"`
	CreatedAt  time.Time  `db:"created_at"`
	Truncated  bool       `db:"truncated"`  // cut at the in-memory bound (migration 0005)
	RoundHour  time.Time  `db:"round_hour"` // the campaign's hour: the partition key (migration 0012)
}

// Measurement is one timed DNS exchange (warm-up or measured) over one protocol.
// MeasurementID must be MeasurementKey.ID().
type Measurement struct {
	MeasurementID [16]byte   `db:"measurement_id"`
	CampaignID    int64      `db:"campaign_id"`
	Address       netip.Addr `db:"address"`
	Protocol      string     `db:"protocol"`
	Port          int32      `db:"port"`
	Variant       string     `db:"variant"`
	Mode          string     `db:"mode"`
	KeyShare      string     `db:"key_share"`
	Phase         string     `db:"phase"`
	Seq           int16      `db:"seq"`
	StartedAt     time.Time  `db:"started_at"`
	HandshakeNS   *int64     `db:"handshake_ns"`
	ResolveNS     *int64     `db:"resolve_ns"`
	Status        string     `db:"status"`
	Error         string     `db:"error"`
	Rcode         *int16     `db:"rcode"`
	Answers       []string   `db:"answers"`
	TLSVersion    *int32     `db:"tls_version"`
	TLSCipher     *string    `db:"tls_cipher"`
	QUICVersion   *int64     `db:"quic_version"`
	ALPN          *string    `db:"alpn"`
	TokenReceived *bool      `db:"token_received"`
	TokenUsed     *bool      `db:"token_used"`
	RetrySeen     *bool      `db:"retry_seen"`
	VNSeen        *bool      `db:"vn_seen"`
	Resumed       *bool      `db:"resumed"`
	Used0RTT      *bool      `db:"used_0rtt"`
	TFO           *bool      `db:"tfo"`
	QlogID        *[16]byte  `db:"qlog_id"`
	RoundHour     time.Time  `db:"round_hour"` // the campaign's hour: the partition key (migration 0012)
}

// RTTSample is one RTT probe to a resolver's port over one transport.
type RTTSample struct {
	CampaignID int64      `db:"campaign_id"`
	Address    netip.Addr `db:"address"`
	Transport  string     `db:"transport"`
	Port       int32      `db:"port"`
	Seq        int16      `db:"seq"`
	SentAt     time.Time  `db:"sent_at"`
	RTTNS      *int64     `db:"rtt_ns"`
	Status     string     `db:"status"`
	Detail     string     `db:"detail"`
	RoundHour  time.Time  `db:"round_hour"` // the campaign's hour: the partition key (migration 0012)
}

// HandshakeAnalysis says why a handshake took the round trips it took.
type HandshakeAnalysis struct {
	MeasurementID      [16]byte  `db:"measurement_id"`
	RTTNS              *int64    `db:"rtt_ns"`
	Ratio              *float32  `db:"ratio"`
	RoundTrips         *int16    `db:"round_trips"`
	OneRTT             bool      `db:"one_rtt"`
	VersionNegotiation bool      `db:"version_negotiation"`
	Retry              bool      `db:"retry"`
	AmplificationStall bool      `db:"amplification_stall"`
	Loss               bool      `db:"loss"`
	ClientInitialBytes *int32    `db:"client_initial_bytes"`
	ServerBytesPreAck  *int32    `db:"server_bytes_pre_ack"`
	StallNS            *int64    `db:"stall_ns"`
	Cause              string    `db:"cause"`
	Detail             []byte    `db:"detail"`     // JSON
	RoundHour          time.Time `db:"round_hour"` // the measurement's: the partition key (migration 0012)
}

// ResolverFeature records whether a resolver supports one optional feature.
type ResolverFeature struct {
	CampaignID int64      `db:"campaign_id"`
	Address    netip.Addr `db:"address"`
	Protocol   string     `db:"protocol"`
	Port       int32      `db:"port"`
	Feature    string     `db:"feature"`
	Supported  *bool      `db:"supported"`
	Detail     string     `db:"detail"`
}

// OptOutRequest is an accepted opt-out from the web page (natural key: prefix, email).
type OptOutRequest struct {
	Prefix     netip.Prefix `db:"prefix"`
	Email      string       `db:"email"`
	Note       string       `db:"note"`
	SourceAddr *netip.Addr  `db:"source_addr"`
	Status     string       `db:"status"`
	CreatedAt  time.Time    `db:"created_at"`
}
