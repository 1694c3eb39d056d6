package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/delayline"
	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// PathSetRequest is the delay-line control request of `testnet path set TARGET [--loss
// L] [--rtt D] [--jitter D]`: target an address or prefix, loss a percentage ("5%") or a
// probability ("0.05"), rtt and jitter durations; an attribute given as "" keeps its
// value, and at least one must be given.
func PathSetRequest(target, loss, rtt, jitter string) (string, error) {
	if target == "" || strings.HasPrefix(target, "-") {
		return "", fmt.Errorf("path set needs an address or prefix first")
	}
	req := []string{"set", target}
	if loss != "" {
		x, err := ParseLoss(loss)
		if err != nil {
			return "", err
		}
		req = append(req, "loss="+strconv.FormatFloat(x, 'g', -1, 64))
	}
	for _, a := range []struct{ name, v string }{{"rtt", rtt}, {"jitter", jitter}} {
		if a.v == "" {
			continue
		}
		if _, err := time.ParseDuration(a.v); err != nil {
			return "", fmt.Errorf("path set: bad --%s %q", a.name, a.v)
		}
		req = append(req, a.name+"="+a.v)
	}
	if len(req) == 2 {
		return "", fmt.Errorf("path set needs at least one of --loss, --rtt, --jitter")
	}
	return strings.Join(req, " "), nil
}

// ParseLoss reads a loss as a percentage ("5%") or a probability ("0.05").
func ParseLoss(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	x, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if pct {
		x /= 100
	}
	if err != nil || !(x >= 0 && x <= 1) {
		return 0, fmt.Errorf("bad loss %q (a percentage like 5%% or a probability from 0 to 1)", s)
	}
	return x, nil
}

// PathControl sends a `testnet path` request ("show", "reset [TARGET]", PathSetRequest)
// to instance name's delay line and returns its answer.
func PathControl(ctx context.Context, home, name, request string) (string, error) {
	return delayline.ControlRequest(ctx, ControlSocket(home, name), request)
}

// LossControl sets and resets the emulated per-direction loss of paths of the instance
// a command runs in ($DOQSCAN_TESTNET, as `testnet exec` sets it, else the default),
// through its delay line's control socket: dnsbench's --loss-sweep (dnsbench.LossSetter).
func LossControl(home string) (set func(context.Context, netip.Addr, float64) error, reset func(context.Context) error) {
	name := os.Getenv(netns.EnvInstance)
	if name == "" {
		name = netns.DefaultInstance
	}
	set = func(ctx context.Context, a netip.Addr, loss float64) error {
		_, err := SetPath(ctx, home, name, a.String(), "loss="+strconv.FormatFloat(loss, 'g', -1, 64))
		return err
	}
	reset = func(ctx context.Context) error { return ResetPaths(ctx, home, name, "") }
	return set, reset
}
