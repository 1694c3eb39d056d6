// Command zprobe is the weekly scan of doqscan: zmap's udp module sends a VN-forcing QUIC
// Initial to UDP/784, 853 and 8853 and a DNS query to UDP/53, and every reply is
// classified and stored while zmap runs. The subcommands and their flags live in
// internal/probe/command, the scan in internal/probe.
package main

import "github.com/doqscan/doqscan/internal/probe/command"

func main() { command.Tool().Main() }
