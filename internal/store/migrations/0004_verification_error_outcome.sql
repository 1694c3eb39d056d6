-- verification_results.outcome gains 'error': the verifier itself failed on a target (a
-- panic in its worker, recovered; the stack is in the run's log). The target keeps a
-- row, so the run completes and a summary counts it, instead of the process dying.
ALTER TABLE verification_results DROP CONSTRAINT IF EXISTS verification_results_outcome_check;
ALTER TABLE verification_results ADD CONSTRAINT verification_results_outcome_check CHECK (outcome IN (
    'doq-verified',      -- DoQ ALPN + a DNS answer (NOERROR/NXDOMAIN)
    'doq-refused',       -- DoQ handshake ok, DNS REFUSED
    'doq-dns-error',     -- DoQ handshake ok, other rcode / bad reply / no reply
    'quic-not-doq',      -- QUIC, but no DoQ ALPN accepted
    'version-mismatch',  -- no common QUIC version
    'sni-required',      -- handshake only with a server name
    'timeout',
    'tls-error',
    'protocol-error',
    'unreachable',
    'error'));           -- the verifier failed on the target (recovered panic)
