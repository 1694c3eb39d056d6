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

// PathArgs turns `testnet path` arguments into a delay-line control request:
//
//	set ADDR|PREFIX [--loss 5%|0.05] [--rtt 30ms] [--jitter 1ms]
//	reset [ADDR|PREFIX]
//	show
//
// Loss takes a percentage ("5%") or a probability ("0.05").
func PathArgs(args []string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("path needs set, reset or show")
	}
	switch args[0] {
	case "show":
		if len(args) != 1 {
			return "", fmt.Errorf("path show takes no arguments")
		}
		return "show", nil
	case "reset":
		if len(args) > 2 {
			return "", fmt.Errorf("path reset takes at most one address or prefix")
		}
		return strings.Join(args, " "), nil
	case "set":
	default:
		return "", fmt.Errorf("unknown path subcommand %q (set, reset, show)", args[0])
	}
	if len(args) < 2 || strings.HasPrefix(args[1], "-") {
		return "", fmt.Errorf("path set needs an address or prefix first")
	}
	req := []string{"set", args[1]}
	rest := args[2:]
	for len(rest) > 0 {
		name := strings.TrimLeft(rest[0], "-")
		val, hasVal := "", false
		if k, v, ok := strings.Cut(name, "="); ok {
			name, val, hasVal = k, v, true
			rest = rest[1:]
		} else if len(rest) > 1 {
			val, hasVal = rest[1], true
			rest = rest[2:]
		}
		if !hasVal {
			return "", fmt.Errorf("path set: --%s needs a value", name)
		}
		switch name {
		case "loss":
			x, err := ParseLoss(val)
			if err != nil {
				return "", err
			}
			req = append(req, "loss="+strconv.FormatFloat(x, 'g', -1, 64))
		case "rtt", "jitter":
			if _, err := time.ParseDuration(val); err != nil {
				return "", fmt.Errorf("path set: bad --%s %q", name, val)
			}
			req = append(req, name+"="+val)
		default:
			return "", fmt.Errorf("path set: unknown option --%s (loss, rtt, jitter)", name)
		}
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

// PathControl sends a `testnet path` request (PathArgs) to instance name's delay line.
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
