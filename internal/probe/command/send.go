package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/optout/pace"
	"github.com/doqscan/doqscan/internal/probe"
)

func sendFlags(fs *flag.FlagSet) runFunc {
	var tf targetFlags
	var pf probeFlags
	tf.register(fs)
	pf.register(fs)
	var vf cli.VantageFlags
	var label, week, hitlist string
	var rate float64
	var cooldown time.Duration
	var asJSON bool
	vf.Register(fs)
	fs.StringVar(&label, "label", "hitlist", "scan label")
	fs.StringVar(&week, "week", "", "ISO week (default: now)")
	fs.StringVar(&hitlist, "hitlist", "", "file of addresses (IPv4 or IPv6, one a line); each must be inside the allowlist")
	cli.FloatVar(fs, &rate, "rate", 1000, probe.MinSendRate, probe.MaxRate, "probes per second")
	cli.DurationVar(fs, &cooldown, "cooldown", 3*time.Second, time.Millisecond, time.Hour, "wait for replies after the last probe")
	cli.RegisterJSON(fs, &asJSON, "reply the scan holds (address and port that answered; the summary goes to the log)")
	return func(ctx context.Context, log *slog.Logger, args []string) error {
		if vf.ID == "" || hitlist == "" {
			return cli.Usagef("--vantage (default %s) and --hitlist are required", cli.DefaultVantageID)
		}
		targets, tb, err := tf.prefixes(args)
		if err != nil {
			return err
		}
		hl, err := probe.ReadHitlist(hitlist)
		if err != nil {
			return classify(fmt.Errorf("--hitlist: %w", err)) // 5 unopenable, 2 a bad line or a prefix
		}
		if err := pace.CheckSendPace(rate, hl); err != nil {
			return classify(err)
		}
		q, d, qp, dp, err := pf.payloads()
		if err != nil {
			return err
		}
		s, safety, err := tf.openSafe(ctx, log, targets, tb)
		if err != nil {
			return err
		}
		defer s.Close()
		sum, err := probe.Send(ctx, probe.SendConfig{Store: s, Log: log, VantageID: vf.ID, VantageLocation: vf.Location, VantageContact: vf.Contact, Label: label, Week: week,
			QUICPorts: qp, DNSPorts: dp, QUIC: q, DNS: d, Hitlist: hl, Safety: safety, Rate: rate, Cooldown: cooldown})
		return classify(errors.Join(err, output(ctx, s, sum, asJSON, log)))
	}
}
