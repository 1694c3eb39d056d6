package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
)

// Interrupted is the cause of the context RunMain cancels on SIGINT or SIGTERM. It is
// a context.Canceled (exit code 130).
type Interrupted struct{ Signal os.Signal }

func (e *Interrupted) Error() string        { return e.Signal.String() + " received" }
func (e *Interrupted) Is(target error) bool { return target == context.Canceled }

// ChildExitError says a child command ended unsuccessfully: Code is its exit status,
// or 128+N when signal N ended it. A command that ran it exits with the same code.
type ChildExitError struct {
	Name   string
	Code   int
	Signal syscall.Signal // the signal that ended it, or 0
}

func (e *ChildExitError) Error() string {
	if e.Signal != 0 {
		return fmt.Sprintf("%s ended by %v (exit %d)", e.Name, e.Signal, e.Code)
	}
	return fmt.Sprintf("%s exited with %d", e.Name, e.Code)
}

// forwarded are the signals RunChild passes on to the child.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// RunChild runs c to its end the way a wrapper must (testnet exec, jobrun):
//
//   - SIGINT, SIGTERM and SIGHUP sent to this process are forwarded to the child, which
//     ends on its own terms (doqscan's tools store what they measured and exit 130);
//     RunChild waits for it and never kills it.
//   - When ctx ends for another reason than those signals (its cause is not an
//     *Interrupted), the child gets SIGTERM, and RunChild still waits.
//   - If this process dies (even by SIGKILL), the kernel sends the child SIGTERM
//     (PR_SET_PDEATHSIG): it is never left running as an orphan.
//
// It returns nil when the child exited 0, a *ChildExitError with its exit code (or
// 128+signal) otherwise, or the error that kept it from starting.
func RunChild(ctx context.Context, c *exec.Cmd) error {
	if err := context.Cause(ctx); err != nil {
		return err // interrupted before the child started
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = syscall.SIGTERM
	// The parent-death signal fires when the thread that forked the child exits: keep
	// this goroutine on that thread until the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		ctxDone := ctx.Done()
		for {
			select {
			case s := <-sigs:
				c.Process.Signal(s) //nolint:errcheck // the child may be gone already
			case <-ctxDone:
				ctxDone = nil
				if _, bySignal := errors.AsType[*Interrupted](context.Cause(ctx)); !bySignal {
					c.Process.Signal(syscall.SIGTERM) //nolint:errcheck // the child may be gone already
				}
			case <-done:
				return
			}
		}
	}()
	err := c.Wait()
	close(done)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	ce := &ChildExitError{Name: c.Args[0], Code: ee.ExitCode()}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ce.Signal = ws.Signal()
		ce.Code = 128 + int(ce.Signal)
	}
	return ce
}
