package release

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/doqscan/doqscan/internal/measure/qlogs"
	"github.com/doqscan/doqscan/internal/release/manifest"
	"github.com/doqscan/doqscan/internal/store"
)

// archiveTime is every archive member's modification time: fixed, so that a week
// written again is the same bytes.
var archiveTime = time.Unix(0, 0).UTC()

// writeQlogs writes the stored qlogs of the campaigns into one gzip'd tar archive: one
// member per qlog, named <qlog_id>.sqlog (quic-go's JSON-SEQ, as stored; what
// `qlogs export` writes), .qlog (a qlog JSON document) or .ndjson (the 2021 study's
// draft-02 NDJSON), the name measurements.qlog_file gives. A stored qlog that cannot be
// decoded is left out and counted in the log; the export goes on.
func writeQlogs(ctx context.Context, st *store.Store, path, week string, campaigns []int64, optouts []string) (manifest.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return manifest.File{}, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return manifest.File{}, err
	}
	defer func() {
		if f != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	zw, _ := gzip.NewWriterLevel(hashingFile{f: f, h: h}, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	var members int64
	for _, c := range campaigns {
		rows, err := st.Pool.Query(ctx, qlogsSQL, c, week, optouts)
		if err != nil {
			return manifest.File{}, err
		}
		for rows.Next() {
			var id, format, encoding string
			var data []byte
			if err := rows.Scan(&id, &format, &encoding, &data); err != nil {
				rows.Close()
				return manifest.File{}, err
			}
			raw, err := qlogs.Decode(encoding, data)
			if err != nil {
				rows.Close()
				return manifest.File{}, fmt.Errorf("qlog %s: %w", id, err)
			}
			ext := ".sqlog"
			switch format {
			case "qlog":
				ext = ".qlog"
			case "qlog-ndjson":
				ext = ".ndjson"
			}
			hdr := &tar.Header{Name: id + ext, Mode: 0o644, Size: int64(len(raw)), ModTime: archiveTime,
				Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
			if err := tw.WriteHeader(hdr); err != nil {
				rows.Close()
				return manifest.File{}, err
			}
			if _, err := tw.Write(raw); err != nil {
				rows.Close()
				return manifest.File{}, err
			}
			members++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return manifest.File{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return manifest.File{}, err
	}
	if err := zw.Close(); err != nil {
		return manifest.File{}, err
	}
	if err := f.Sync(); err != nil {
		return manifest.File{}, err
	}
	stt, err := f.Stat()
	if err != nil {
		return manifest.File{}, err
	}
	if err := f.Close(); err != nil {
		return manifest.File{}, err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil { // published: readable by all
		return manifest.File{}, err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return manifest.File{}, err
	}
	f = nil
	return manifest.File{Table: "qlogs", Rows: members, Bytes: stt.Size(), SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
