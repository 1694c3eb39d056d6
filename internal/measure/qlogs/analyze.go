// Package qlogs is the `qlogs` command: explain the handshakes of qlog files of any
// vintage (qlogana's rules; quic-go's JSON-SEQ of today, the draft-02 NDJSON of quic-go
// v0.2x, qlog JSON, gzip of any) and export a campaign's stored qlogs as files that qvis
// opens.
package qlogs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"time"

	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/quicver"
)

// maxFileSize bounds one input file (a handshake's qlog is tens of KB).
const maxFileSize = 64 << 20

// Error classes of a file that could not be analysed (Report.Error.Class).
const (
	ClassUnreadable = "unreadable" // the file could not be opened or read
	ClassNotQlog    = "not-qlog"   // none of the serialisations qlogana reads
	ClassTooLarge   = "too-large"  // beyond the reader's bounds
	ClassNoPackets  = "no-packets" // a qlog without any QUIC packet
)

// ErrUnreadable: some file could not be read (exit code 5). ErrUnanalysable: some file
// was read but is not an analysable qlog (exit code 1). Either is returned after every
// file has its line.
var (
	ErrUnreadable   = errors.New("some files could not be read")
	ErrUnanalysable = errors.New("some files are not analysable qlogs")
)

// Report is the line `qlogs analyze` prints for one file.
type Report struct {
	File   string `json:"file"`
	Format string `json:"format,omitempty"` // json-seq, ndjson, json, json-array
	Gzip   bool   `json:"gzip,omitempty"`
	*Findings
	Truncated bool       `json:"truncated,omitempty"` // the file ends inside a record; what precedes it was analysed
	Error     *FileError `json:"error,omitempty"`
}

// Findings is what the analysis says about a file's handshake.
type Findings struct {
	ODCID              string  `json:"odcid"`        // hex; the first trace's
	QUICVersion        string  `json:"quic_version"` // e.g. "0xff00001d"; "" if the qlog names none
	QUICVersionName    string  `json:"quic_version_name,omitempty"`
	Traces             int     `json:"traces"`
	HandshakeComplete  bool    `json:"handshake_complete"`
	HandshakeMS        float64 `json:"handshake_ms,omitempty"`
	Retry              bool    `json:"retry"`
	VersionNegotiation bool    `json:"version_negotiation"`
	AmplificationStall bool    `json:"amplification_stall"`
	Loss               bool    `json:"loss"`
	RoundTrips         int     `json:"round_trips"`
	Cause              string  `json:"cause"`
	// Close is how the connection ended, when the handshake did not complete and the
	// qlog says (who closed it, the error and its code, the reason, a trigger such as
	// idle_timeout): a refused handshake says why.
	Close *qlogana.Close `json:"close,omitempty"`
}

// FileError is a file's classified failure.
type FileError struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

// AnalyzeBytes analyses one qlog's bytes (any serialisation qlogana reads). rtt is the
// path RTT that groups packets into flights, measured apart from the qlog (the measure
// stage's RTT probe, stored as handshake_analyses.rtt_ns); 0 takes the qlog's own
// min_rtt, which CPU load can inflate on a short path.
func AnalyzeBytes(name string, b []byte, rtt time.Duration) Report {
	r := Report{File: name}
	tr, err := qlogana.Parse(b)
	if err != nil {
		r.Error = &FileError{Class: classOf(err), Message: err.Error()}
		return r
	}
	a, err := tr.Analyze(qlogana.Options{RTTNS: rtt.Nanoseconds()})
	if err != nil {
		r.Error = &FileError{Class: classOf(err), Message: err.Error()}
		return r
	}
	src := tr.Source
	r.Format, r.Gzip, r.Truncated = src.Format, src.Gzip, src.Truncated
	f := &Findings{
		ODCID: src.ODCID, Traces: src.Traces, HandshakeComplete: a.HandshakeComplete,
		Retry: a.Retry, VersionNegotiation: a.VersionNegotiation, AmplificationStall: a.AmplificationStall,
		Loss: a.Loss, RoundTrips: a.RoundTrips, Cause: a.Cause,
	}
	if tr.QUICVersion != 0 {
		f.QUICVersion = fmt.Sprintf("0x%08x", tr.QUICVersion)
		f.QUICVersionName = quicver.Name(tr.QUICVersion)
	}
	if a.HandshakeComplete {
		f.HandshakeMS = float64(a.HandshakeNS) / 1e6
	} else {
		f.Close = tr.Close
	}
	r.Findings = f
	return r
}

func classOf(err error) string {
	switch {
	case errors.Is(err, qlogana.ErrTooLarge):
		return ClassTooLarge
	case errors.Is(err, qlogana.ErrNoHandshake):
		return ClassNoPackets
	}
	return ClassNotQlog
}

// AnalyzeFile reads and analyses one file (rtt: see AnalyzeBytes). The file is opened
// without blocking (listfile.Open): a FIFO, socket or device gets an unreadable line
// instead of stopping the run.
func AnalyzeFile(path string, rtt time.Duration) Report {
	b, err := listfile.ReadAll(path, maxFileSize)
	if err != nil {
		return unreadableReport(path, err)
	}
	return AnalyzeBytes(path, b, rtt)
}

// unreadableReport is the line of a file that could not be read.
func unreadableReport(path string, err error) Report {
	class := ClassUnreadable
	if errors.Is(err, listfile.ErrTooLarge) {
		class = ClassTooLarge
	}
	return Report{File: path, Error: &FileError{Class: class, Message: err.Error()}}
}

// input is one file named by the paths, or the error that stands in its place.
type input struct {
	path string
	err  error
}

// expand lists the files named by paths: a file as is; a directory (or a link to one)
// its files, recursively in lexical order, links followed (listfile.Walk). A path that
// does not exist, a FIFO, socket or device, a link to nothing, and a directory without
// a single file each stand as an error, so that every path named has a line.
func expand(paths []string) []input {
	var out []input
	for _, p := range paths {
		n := len(out)
		_ = listfile.Walk(p, func(path string, mode fs.FileMode, err error) error {
			switch {
			case err != nil:
				out = append(out, input{path, err})
			case mode.IsRegular():
				out = append(out, input{path: path})
			}
			return nil
		})
		if len(out) == n {
			out = append(out, input{p, &listfile.OpenError{File: p, Err: ErrEmptyDirectory}})
		}
	}
	return out
}

// ErrEmptyDirectory is the error of a directory named to analyze that holds no file.
var ErrEmptyDirectory = errors.New("a directory without any file to analyze")

// Analyze prints one JSON line per file of paths to w, in order. It returns
// ErrUnreadable (wrapped) if a file could not be read, else ErrUnanalysable if a file
// is not an analysable qlog, else nil; every file has its line either way.
// rtt: see AnalyzeBytes (one path RTT for every file; 0: each qlog's own).
func Analyze(ctx context.Context, paths []string, rtt time.Duration, w io.Writer, log *slog.Logger) error {
	files := expand(paths)
	enc := json.NewEncoder(w)
	var unreadable, unanalysable int
	start, lastProgress := time.Now(), time.Now()
	for i, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		var r Report
		if f.err != nil {
			r = unreadableReport(f.path, f.err)
		} else {
			r = AnalyzeFile(f.path, rtt)
		}
		if r.Error != nil {
			if r.Error.Class == ClassUnreadable {
				unreadable++
			} else {
				unanalysable++
			}
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
		if time.Since(lastProgress) > 5*time.Second {
			lastProgress = time.Now()
			log.Info("progress", "files", i+1, "of", len(files), "files_per_s", float64(i+1)/time.Since(start).Seconds())
		}
	}
	log.Debug("analysed", "files", len(files), "unreadable", unreadable, "unanalysable", unanalysable, "elapsed", time.Since(start))
	switch {
	case unreadable > 0:
		return fmt.Errorf("%w: %d of %d", ErrUnreadable, unreadable, len(files))
	case unanalysable > 0:
		return fmt.Errorf("%w: %d of %d", ErrUnanalysable, unanalysable, len(files))
	}
	return nil
}
