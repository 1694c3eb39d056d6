-- The performance database's schema as the datasets README documents it (GORM models
-- of mgranderath/dns-measurements, commit 8abde73). Read by internal/dataset's tests and
-- analysis/tests/test_dataset.py.
CREATE TABLE dns_measurements (id text, cache_warming numeric, ip text, port integer, protocol text,
  created integer, updated integer, udp_socket_setup_duration integer, tcp_handshake_duration integer,
  tls_handshake_duration integer, tls_version integer, tls_error integer, q_ui_c_handshake_duration integer,
  q_ui_c_version integer, q_ui_c_negotiated_protocol text, q_ui_c_error integer, http_version text,
  query_time integer, total_time integer, r_code integer, response_ip text, error text,
  PRIMARY KEY (id, cache_warming));
CREATE TABLE traceroutes (dns_measurement_id text, timestamp datetime, ttl integer, dest_ip text,
  dest_port integer, protocol text, hop_ip text, rtt integer);
CREATE TABLE q_log_outputs (dns_measurement_id text, content text);
