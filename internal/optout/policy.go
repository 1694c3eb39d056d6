package optout

import (
	"fmt"
	"net/netip"
)

// Status of an opt-out request, as in optout_requests.status. Only accepted requests are
// honoured (blocklist.OptOuts, optout.conf).
const (
	StatusPending   = "pending"   // recorded; waits for an operator (optout accept|reject)
	StatusAccepted  = "accepted"  // honoured by every scan and measurement that starts later
	StatusRejected  = "rejected"  // an operator declined it (with a reason)
	StatusWithdrawn = "withdrawn" // was accepted or pending, then taken back by an operator
)

// Policy decides which requests from the page are honoured at once and which wait for an
// operator. A requester's address is the TCP peer of the submission (the handshake
// proves it can receive there); headers such as X-Forwarded-For are never read, so behind
// a proxy every request looks like the proxy's and waits for review under own-range.
type Policy string

const (
	// PolicyOwnRange honours at once a request for a range that contains the requester's
	// own address and is no larger than the OwnRange limits; any other waits for review.
	PolicyOwnRange Policy = "own-range"
	// PolicyAll honours every valid request at once (ZMap's guideline taken literally;
	// anyone can then exclude any range up to the form's limit).
	PolicyAll Policy = "all"
	// PolicyReviewAll records every request as pending.
	PolicyReviewAll Policy = "review-all"
)

// Policies lists the valid policies.
var Policies = []Policy{PolicyOwnRange, PolicyAll, PolicyReviewAll}

// ParsePolicy checks a --policy value.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown policy %q: want own-range, all or review-all", s)
}

// DefaultOwnRange is the largest own-range request honoured at once: a /24 (IPv4) or a
// /48 (IPv6), the smallest blocks routed between networks. A requester inside a larger
// block (a cloud provider's /16, an ISP's /12) cannot blind the study to the whole block
// from one address it rents; such a request waits for review.
var DefaultOwnRange = Limits{MinBitsV4: 24, MinBitsV6: 48}

// Decision is what the policy made of one request.
type Decision struct {
	Status string // StatusAccepted or StatusPending
	Reason string // why, in words for the audit row and the log
}

// Decide applies the policy to a validated prefix requested from source (invalid: the
// peer address was not known).
func (p Policy) Decide(prefix netip.Prefix, source netip.Addr, own Limits) Decision {
	switch p {
	case PolicyAll:
		return Decision{StatusAccepted, "policy all: every request is honoured at once"}
	case PolicyReviewAll:
		return Decision{StatusPending, "policy review-all: every request waits for an operator"}
	}
	source = source.Unmap()
	if !source.IsValid() || !prefix.Contains(source) {
		return Decision{StatusPending, fmt.Sprintf("policy own-range: the requester's address %s is outside %s", addrOrUnknown(source), prefix)}
	}
	min := own.MinBitsV4
	if prefix.Addr().Is6() {
		min = own.MinBitsV6
	}
	if prefix.Bits() < min {
		return Decision{StatusPending, fmt.Sprintf("policy own-range: %s contains the requester's address %s but is larger than a /%d", prefix, source, min)}
	}
	return Decision{StatusAccepted, fmt.Sprintf("policy own-range: %s contains the requester's address %s", prefix, source)}
}

func addrOrUnknown(a netip.Addr) string {
	if !a.IsValid() {
		return "(unknown)"
	}
	return a.String()
}
