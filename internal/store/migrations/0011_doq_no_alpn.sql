-- verification_results.outcome gains 'doq-no-alpn': a server that refused every DoQ
-- ALPN (TLS alert no_application_protocol) but completed a handshake offering no ALPN at
-- all, and answered a DNS query over it framed as RFC 9250 (2-byte length prefix) with a
-- well-formed reply (any rcode, in dns_rcode; alpn is ''). Before, such a server was
-- 'quic-not-doq', which is right by RFC 9250 §4.1.1 but hides it from adoption counts.
-- Widening: existing rows satisfy it.
ALTER TABLE verification_results DROP CONSTRAINT IF EXISTS verification_results_outcome_check;
ALTER TABLE verification_results ADD CONSTRAINT verification_results_outcome_check CHECK (outcome IN (
    'doq-verified',      -- DoQ ALPN + a DNS answer (NOERROR/NXDOMAIN)
    'doq-refused',       -- DoQ handshake ok, DNS REFUSED
    'doq-dns-error',     -- DoQ handshake ok, other rcode
    'quic-not-doq',      -- QUIC, but no DoQ ALPN accepted
    'doq-no-alpn',       -- no DoQ ALPN accepted; without ALPN, a DNS reply over RFC 9250 framing
    'version-mismatch',  -- no common QUIC version
    'sni-required',      -- handshake only with a server name
    'timeout',
    'tls-error',
    'protocol-error',
    'unreachable',
    'error')) NOT VALID; -- the verifier failed on the target (recovered panic)
