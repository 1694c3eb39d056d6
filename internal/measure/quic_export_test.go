package measure

import "time"

// SetFinishPhases sets the hook that receives the steps of finishing a QUIC exchange;
// the returned function puts the previous one back.
func SetFinishPhases(f func(res *Result, began time.Time, closing, qlogWait, analysis time.Duration)) (restore func()) {
	old := finishPhases
	finishPhases = f
	return func() { finishPhases = old }
}
