// Package wirecap is the timing benchmarks' independent ground truth: a real packet
// capture (tcpdump) on the testbed's wire, and the code that says how long each span a
// client measured took on that wire. With it a benchmark splits a measured duration into
//
//	client error = measured - wire         (what the measuring tool adds)
//	path+server  = wire - emulated RTT     (the delay line and the simulated server)
//
// Capture: ForVantage(ctx, instance, i) runs tcpdump on the router side of vantage i's
// link (ingress: right after the client transmitted; egress: right after the delay line
// released the packet towards the client); Start does the same for any namespace and
// interface. Stop returns the packets and tcpdump's counters (report drops).
//
// Decoding: Parse / NewReader read classic pcap (µs and ns magics, both byte orders;
// Ethernet, raw IPv4, Linux cooked) and return IPv4 TCP/UDP packets with their
// transport payload size taken from the IP total length (the snaplen cuts the bytes).
//
// Spans: NewIndex groups packets by flow; Index.TCPHandshake / Handshake give the wire
// time from a client's SYN to the SYN-ACK (or RST), Index.Exchange the wire span of one
// exchange the client timed from its send stamp to its kernel receive stamp.
package wirecap
