package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/doqscan/doqscan/internal/store/fleet"
	"github.com/doqscan/doqscan/internal/store/pgcluster"
	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// The central database of a fleet (Options.DB): a PostgreSQL cluster of its own, run in
// <inst>-db behind the delay line at netns.DBAddr, serving vantage points over TCP with
// TLS and client certificates (pgcluster.ServeFleet) and the admin on its Unix socket
// under <state>/db (reachable from the host and every namespace). Its CA and
// certificates are in <state>/fleet (fleet.Init); a vantage point's credentials come
// from fleet.IssueClient after store.AddVantageRole.

// DBCluster is the instance's central database cluster.
func (tb *Testbed) DBCluster() (*pgcluster.Cluster, error) {
	def, err := pgcluster.Default()
	if err != nil {
		return nil, err
	}
	return &pgcluster.Cluster{Dir: filepath.Join(tb.State, "db"), BinDir: def.BinDir, OSUser: def.OSUser,
		Netns: tb.DBNamespace()}, nil
}

// FleetDir holds the central database's CA, server and client certificates.
func (tb *Testbed) FleetDir() string { return filepath.Join(tb.State, "fleet") }

// DBAdminURL is the admin's connection to the central database (its Unix socket).
func (tb *Testbed) DBAdminURL() (string, error) {
	c, err := tb.DBCluster()
	if err != nil {
		return "", err
	}
	return c.URL(), nil
}

// ensureDB creates the certificates (once) and starts the central database in its
// namespace, listening on netns.DBAddr.
func (tb *Testbed) ensureDB(ctx context.Context) error {
	c, err := tb.DBCluster()
	if err != nil {
		return fmt.Errorf("central database: %w", err)
	}
	if err := fleet.Init(tb.FleetDir(), []string{netns.DBAddr.String()}); err != nil && !errors.Is(err, fleet.ErrExists) {
		return fmt.Errorf("central database: %w", err)
	}
	if err := os.Chmod(tb.State, 0o755); err != nil {
		return err
	}
	if err := c.ServeFleet(ctx, netns.DBAddr.String(), tb.FleetDir()); err != nil {
		return fmt.Errorf("central database: %w", err)
	}
	tb.Opts.Log.Info("central database up", "namespace", tb.DBNamespace(), "address", netns.DBAddr, "admin", c.URL())
	return nil
}
