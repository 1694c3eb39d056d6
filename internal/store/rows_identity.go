package store

import (
	"net/netip"
	"time"
)

// Tables of migration 0020: what each resolver is (its QUIC library, its DDR
// designations) and what its server allows a connection (0022: how long it honours
// NEW_TOKEN tokens).
const (
	TableQUICStacks          = "quic_stacks"
	TableDDRQueries          = "ddr_queries"
	TableDDRDesignations     = "ddr_designations"
	TableConnectionPolicies  = "connection_policies"
	TableAmplificationProbes = "amplification_probes"
)

// QUICStack is the QUIC library identification of one verification result.
type QUICStack struct {
	RunID     int64      `db:"run_id"`
	Address   netip.Addr `db:"address"`
	Port      int32      `db:"port"`
	Library   string     `db:"library"`
	Matched   []string   `db:"matched"`
	Conflicts []string   `db:"conflicts"`
	Evidence  []byte     `db:"evidence"` // JSON
}

// DDRQuery is the answer of one DNS/53 responder to _dns.resolver.arpa SVCB.
type DDRQuery struct {
	RunID     int64      `db:"run_id"`
	Address   netip.Addr `db:"address"`
	Status    string     `db:"status"`
	Rcode     *int16     `db:"rcode"`
	Records   *int16     `db:"records"`
	Detail    string     `db:"detail"`
	QueriedAt time.Time  `db:"queried_at"`
}

// DDRDesignation is one SVCB record of a DDR answer: a designated resolver endpoint.
type DDRDesignation struct {
	RunID     int64        `db:"run_id"`
	Resolver  netip.Addr   `db:"resolver"`
	Seq       int16        `db:"seq"`
	Priority  int32        `db:"priority"`
	Target    string       `db:"target"`
	ALPNs     []string     `db:"alpns"`
	Port      *int32       `db:"port"`
	DoHPath   *string      `db:"dohpath"`
	IPv4Hints []netip.Addr `db:"ipv4hints"`
	IPv6Hints []netip.Addr `db:"ipv6hints"`
}

// ConnectionPolicy is what one server allows a connection of one protocol.
type ConnectionPolicy struct {
	RunID            int64      `db:"run_id"`
	Address          netip.Addr `db:"address"`
	Port             int32      `db:"port"`
	Protocol         string     `db:"protocol"`
	Status           string     `db:"status"`
	QueriesSent      *int32     `db:"queries_sent"`
	QueriesAnswered  *int32     `db:"queries_answered"`
	ClosedByServer   *bool      `db:"closed_by_server"`
	CloseDetail      *string    `db:"close_detail"`
	IdleAdvertisedMS *int64     `db:"idle_advertised_ms"`
	IdleAliveMS      *int64     `db:"idle_alive_ms"`
	IdleDeadMS       *int64     `db:"idle_dead_ms"`
	MaxStreams       *int64     `db:"max_streams"`
	TokenIssued      *bool      `db:"token_issued"`
	TokenHonoured    *bool      `db:"token_honoured"`
	// TokenHonouredForMS, TokenRefusedAfterMS (migration 0022): the longest token age
	// honoured and the shortest refused.
	TokenHonouredForMS  *int64    `db:"token_honoured_for_ms"`
	TokenRefusedAfterMS *int64    `db:"token_refused_after_ms"`
	RetryPolicy         *string   `db:"retry_policy"`
	ZeroRTT             *bool     `db:"zero_rtt"`
	Resumed             *bool     `db:"resumed"`
	TicketLifetimeS     *int64    `db:"ticket_lifetime_s"`
	Detail              []byte    `db:"detail"` // JSON
	CheckedAt           time.Time `db:"checked_at"`
}

// AmplificationProbe is one fresh DoQ handshake of the amplification check: a client
// Initial size and key share against the server's first flight.
type AmplificationProbe struct {
	RunID             int64      `db:"run_id"`
	Address           netip.Addr `db:"address"`
	Port              int32      `db:"port"`
	InitialSize       int32      `db:"initial_size"`
	KeyShare          string     `db:"key_share"`
	Status            string     `db:"status"`
	RetrySeen         *bool      `db:"retry_seen"`
	ClientBytes       *int32     `db:"client_bytes"`
	ServerBytesPreAck *int32     `db:"server_bytes_pre_ack"`
	Budget            *int32     `db:"budget"`
	Stalled           *bool      `db:"stalled"`
	StallNS           *int64     `db:"stall_ns"`
	RoundTrips        *int16     `db:"round_trips"`
	Cause             *string    `db:"cause"`
	HandshakeNS       *int64     `db:"handshake_ns"`
	ChainBytes        *int32     `db:"chain_bytes"`
	ChainCerts        *int16     `db:"chain_certs"`
	CheckedAt         time.Time  `db:"checked_at"`
}
