package optout

import (
	"fmt"
	"strings"

	"github.com/doqscan/doqscan/internal/release/manifest"
)

// NoReleaseText is what the page says is published while no data release exists.
const NoReleaseText = "aggregate statistics and figures only: no per-address data has been released. " +
	"An address whose opt-out has been honoured is not contacted, so no data about it is collected from then on; " +
	"data collected before stays in the study's database unless you ask us to delete it."

// PublishedText is the page's "What we publish" when the release directory dir holds
// a release (its manifest.json, written by `dataset export`): what it holds, per
// address, for which weeks and vantage points, where (url, or on request from the
// contact when url is empty), and that honoured opt-outs are left out of every release
// written after them. Without a release (or an unreadable manifest: the page claims
// nothing it cannot read) it is NoReleaseText.
func PublishedText(dir, url, contact string) string {
	if dir == "" {
		return NoReleaseText
	}
	m, err := manifest.Read(dir)
	if err != nil {
		return NoReleaseText
	}
	first, last, vantages := m.Weeks()
	if first == "" {
		return NoReleaseText
	}
	where := "on request from " + contact
	if url != "" {
		where = "at " + url
	}
	weeks := first
	if last != first {
		weeks = first + " to " + last
	}
	return fmt.Sprintf("per-address data, as Parquet files (one set per ISO week and vantage point, schema version %d): "+
		"for every address that answered, its scan replies, verification results and certificates, location (AS, country, city), "+
		"DNS measurements with their timings, RTT samples, handshake analyses and qlogs; weeks %s from vantage point(s) %s, "+
		"last updated %s, published %s; and aggregate statistics and figures. "+
		"An address or range whose opt-out has been honoured is not contacted, so no data about it is collected from then on, and it is left out of every release "+
		"written after the opt-out (the next release rewrites every week without it); copies already downloaded cannot be recalled.",
		m.SchemaVersion, weeks, strings.Join(vantages, ", "), m.UpdatedAt.UTC().Format("2006-01-02"), where)
}

// info is the page's Info with "What we publish" as the release directory says now.
func (s *Server) info() Info {
	in := s.Info
	if s.ReleaseDir != "" || in.Published == "" {
		in.Published = PublishedText(s.ReleaseDir, s.ReleaseURL, in.Contact)
	}
	return in
}
