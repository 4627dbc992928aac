package cli

import (
	"github.com/schollz/progressbar/v3"
)

// progress shows how far long work has gone, on stderr when it is a
// terminal; otherwise (piped, in a Job's log) it draws nothing.
type progress struct {
	bar *progressbar.ProgressBar
}

// newProgress returns a progress of total steps of unit (-1 when
// unknown, which draws a spinner with a count).
func (o *options) newProgress(total int64, what, unit string) *progress {
	if !o.streams.Terminal {
		return &progress{}
	}
	return &progress{bar: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(o.streams.Err),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(unit),
		progressbar.OptionThrottle(100_000_000), // 100ms
		progressbar.OptionClearOnFinish(),
	)}
}

// add counts n steps done.
func (p *progress) add(n int) {
	if p.bar != nil {
		_ = p.bar.Add(n)
	}
}

// done clears the bar.
func (p *progress) done() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
