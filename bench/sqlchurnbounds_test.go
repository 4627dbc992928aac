package bench

import (
	"fmt"
	"testing"
	"time"
)

// churnSizeSlack is what a table takes on disk beyond its rows however
// few they are: InnoDB grows its file by extents of up to several MiB,
// PostgreSQL's free space and visibility maps.
const churnSizeSlack = 16 * churnMiB

// deadBound is the most dead tuples autovacuum lets pile up with live
// tuples live and rate records a second written: its threshold, reached
// at threshold + scale factor · live, and two naptimes' worth (one for
// the launcher to get to the table, one for the vacuum itself) of two
// dead tuples a record (the row version that the completion replaces, the
// row the cleanup deletes).
func (v *churnVacuum) deadBound(live, rate float64) float64 {
	return v.threshold + v.scale*live + 2*rate*2*v.naptime.Seconds()
}

// churnBounds checks a churn run's series against its bounds, fails t on
// any exceeded, and returns the summary lines: each bound with its
// figures, then the time and the disk the run took.
//
// The bounds, with R the average rate of the writing phase, T the
// retention, C the cleanup interval:
//
//   - rate: R at least the floor (DEDUP_SQL_CHURN_FLOOR), less 1% (a run
//     paced at the floor's rate ends a little under it).
//   - size: the table and its indexes, on disk, at most twice what the
//     records take that are within their retention, R·(T+C), and those
//     that autovacuum lets wait dead (PostgreSQL: half the dead-tuple
//     bound below), at the bytes a record took before the first deletion
//     (the table then holds every record written, none deleted, each with
//     the row versions its claim and completion left), plus 16 MiB
//     (churnSizeSlack).
//   - growth: once the table is in its steady state (from 2·(T+C) on, at
//     least four samples of it), its size at the end of the writing phase
//     at most 1.5 times its size at the steady state's start: deletion
//     gives space back as fast as the writers take it.
//   - backlog: the rows expired and not yet deleted at most 2·R·C (what
//     one interval expires, twice), and none left once the table drained.
//   - dead tuples (PostgreSQL): n_dead_tup at most what autovacuum lets
//     pile up (deadBound), with autovacuum on.
//   - purge (MariaDB): the history list length at most R·C (fewer undo
//     logs waiting than the records that one interval writes, each of
//     which is a transaction that updates).
//   - drift: the claim latency's p99 over the last quarter of the steady
//     state (of the writing phase, when the steady state has fewer than
//     eight samples) at most twice that of its first quarter plus 1 ms,
//     and the same of p50.
func churnBounds(t *testing.T, cfg churnConfig, target churnTarget, before churnStats, samples []churnSample, wrote, took time.Duration) []string {
	var out []string
	check := func(ok bool, format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		if ok {
			line = "ok        " + line
		} else {
			line = "EXCEEDED  " + line
			t.Errorf("%s: bound exceeded: %s", target.name, line)
		}
		out = append(out, line)
	}
	note := func(format string, args ...any) { out = append(out, "          "+fmt.Sprintf(format, args...)) }

	var write []churnSample
	for _, s := range samples {
		if s.Phase == "write" {
			write = append(write, s)
		}
	}
	if len(write) == 0 || len(samples) == 0 {
		note("no sample of the writing phase: nothing to check (make DEDUP_SQL_CHURN_SAMPLE shorter)")
		return out
	}
	last := samples[len(samples)-1]
	lastWrite := write[len(write)-1]
	written := last.Written
	rate := float64(written) / wrote.Seconds()
	T, C := cfg.retention.Seconds(), cfg.cleanup.Seconds()

	check(rate >= 0.99*cfg.floor, "rate: %d records in %.0f s, %.0f/s (floor %.0f/s, less 1%% for the pacing of a run at that rate)",
		written, wrote.Seconds(), rate, cfg.floor)

	// Size.
	var fresh *churnSample
	for i := range write {
		if write[i].Deleted == 0 && write[i].Rows > 0 {
			fresh = &write[i]
		}
	}
	var peak churnSample
	for _, s := range write {
		if s.FileBytes > peak.FileBytes {
			peak = s
		}
	}
	// The records that autovacuum lets wait, dead, before it vacuums them:
	// half the dead-tuple bound (two dead tuples a record).
	live := rate * (T + C)
	var waiting float64
	if v := target.vacuum; v != nil {
		waiting = v.deadBound(live, rate) / 2
	}
	if fresh == nil {
		note("size: no sample before the first deletion, so no bytes a record (make DEDUP_SQL_CHURN_SAMPLE shorter than the retention)")
	} else {
		perRow := float64(fresh.FileBytes) / float64(fresh.Rows)
		bound := 2*(live+waiting)*perRow + churnSizeSlack
		check(float64(peak.FileBytes) <= bound,
			"size: peak %.1f MiB at %.0f s (%d rows); bound %.1f MiB = 2·(%.0f records within retention + %.0f waiting for vacuum)·%.0f bytes a record (measured at %.0f s, %d rows) + %d MiB",
			float64(peak.FileBytes)/churnMiB, peak.Elapsed, peak.Rows, bound/churnMiB, live, waiting, perRow, fresh.Elapsed, fresh.Rows, churnSizeSlack/churnMiB)
	}
	var steady []churnSample
	for _, s := range write {
		if s.Elapsed >= 2*(T+C) {
			steady = append(steady, s)
		}
	}
	if len(steady) >= 4 {
		first, end := steady[0], steady[len(steady)-1]
		check(float64(end.FileBytes) <= 1.5*float64(first.FileBytes),
			"growth: %.1f MiB at %.0f s (the steady state's start), %.1f MiB at %.0f s (the writing's end): %.2f times",
			float64(first.FileBytes)/churnMiB, first.Elapsed, float64(end.FileBytes)/churnMiB, end.Elapsed, float64(end.FileBytes)/float64(first.FileBytes))
	} else {
		note("growth: fewer than four samples from %.0f s on (2·(retention+cleanup)): write more records to see the steady state", 2*(T+C))
	}

	// Backlog.
	var maxBacklog churnSample
	for _, s := range write {
		if s.Backlog > maxBacklog.Backlog {
			maxBacklog = s
		}
	}
	check(float64(maxBacklog.Backlog) <= 2*rate*C,
		"backlog: at most %d rows expired and not deleted (at %.0f s), bound 2·rate·cleanup interval = %.0f", maxBacklog.Backlog, maxBacklog.Elapsed, 2*rate*C)
	check(last.Rows == 0, "drained: %d rows left at %.0f s, %.0f s after the last write (%d of them expired)",
		last.Rows, last.Elapsed, last.Elapsed-wrote.Seconds(), last.Backlog)

	var cleanupMax float64
	for _, s := range samples {
		cleanupMax = max(cleanupMax, s.CleanupMax)
	}
	note("cleanup: %d runs deleted %d records in %.1f s of work, %.1f%% of the run's time: %.0f records a second while it ran, against %.0f written a second; the longest run took %.2f s (interval %v)",
		last.Cleanups, last.Deleted, last.CleanupBusy, 100*last.CleanupBusy/took.Seconds(), float64(last.Deleted)/max(last.CleanupBusy, 1e-9), rate, cleanupMax, cfg.cleanup)

	// Dead tuples, or the purge backlog.
	if v := target.vacuum; v != nil {
		var worst churnSample
		worstExcess := -1.0
		var maxDead churnSample
		for _, s := range write {
			if ex := float64(s.DeadTup) / v.deadBound(float64(s.LiveTup), rate); ex > worstExcess {
				worst, worstExcess = s, ex
			}
			if s.DeadTup > maxDead.DeadTup {
				maxDead = s
			}
		}
		bound := v.deadBound(float64(worst.LiveTup), rate)
		check(worstExcess <= 1, "dead tuples: at most %d (at %.0f s, n_live_tup %d); closest to the bound at %.0f s: %d of %.0f = %.0f + %.2f·%d + 2·%.0f/s·2·%v",
			maxDead.DeadTup, maxDead.Elapsed, maxDead.LiveTup, worst.Elapsed, worst.DeadTup, bound, v.threshold, v.scale, worst.LiveTup, rate, v.naptime)
		check(v.on, "autovacuum: %s on the server, %d runs on the table during the run",
			map[bool]string{true: "on", false: "OFF"}[v.on], last.Autovacs-before.Autovacs)
	} else {
		var worst churnSample
		for _, s := range write {
			if s.History > worst.History {
				worst = s
			}
		}
		check(float64(worst.History) <= rate*C, "purge: history list length at most %d (at %.0f s), bound rate·cleanup interval = %.0f",
			worst.History, worst.Elapsed, rate*C)
	}

	// Drift: over the steady state when it has eight samples or more (the
	// writing phase's first quarter has no deletion yet, nor the
	// cleanup's load), else over the whole writing phase.
	window, over := write, "the writing phase"
	if len(steady) >= 8 {
		window, over = steady, fmt.Sprintf("the steady state (from %.0f s)", steady[0].Elapsed)
	} else {
		note("drift: fewer than eight samples of the steady state, so the writing phase's first quarter is before the first expiry")
	}
	if q := len(window) / 4; q == 0 {
		note("drift: the writing phase has too few samples for its first and last quarters")
	} else {
		first, end := churnQuarter(window[:q]), churnQuarter(window[len(window)-q:])
		p50a, p99a, p50b, p99b := first.quantile(0.5), first.quantile(0.99), end.quantile(0.5), end.quantile(0.99)
		check(p99b <= 2*p99a+time.Millisecond && p50b <= 2*p50a+time.Millisecond,
			"drift: claim p50/p99 %.2f/%.2f ms over the first quarter of %s, %.2f/%.2f ms over its last (%d samples each)",
			churnMs(p50a), churnMs(p99a), over, churnMs(p50b), churnMs(p99b), q)
		if len(steady) >= 8 {
			q := len(write) / 4
			first := churnQuarter(write[:q])
			note("claim p50/p99 over the writing phase's first quarter (%d samples): %.2f/%.2f ms", q, churnMs(first.quantile(0.5)), churnMs(first.quantile(0.99)))
		}
	}

	// Time and disk.
	note("time: %.0f s writing, %.0f s draining, %.0f s in all", wrote.Seconds(), took.Seconds()-wrote.Seconds(), took.Seconds())
	logName := "WAL"
	if target.vacuum == nil {
		logName = "redo log"
	}
	note("disk: the table at most %.1f MiB on disk (%.1f MiB at the writing's end, %.1f MiB drained); %s written: %.1f MiB (%.0f bytes a record)",
		float64(peak.FileBytes)/churnMiB, float64(lastWrite.FileBytes)/churnMiB, float64(last.FileBytes)/churnMiB, logName,
		float64(last.LogBytes-before.LogBytes)/churnMiB, float64(last.LogBytes-before.LogBytes)/float64(max(written, 1)))
	if before.DataDir >= 0 {
		var maxDir int64
		for _, s := range samples {
			maxDir = max(maxDir, s.DataDir)
		}
		shared := ""
		if cfg.server == "shared" {
			shared = "; what other users of the shared server wrote meanwhile counts too"
		}
		note("disk: the server's data directory %s grew by at most %.1f MiB (%.1f MiB at the end)%s",
			target.dataDir, float64(maxDir-before.DataDir)/churnMiB, float64(last.DataDir-before.DataDir)/churnMiB, shared)
	}
	return out
}

// churnQuarter is the claim latencies of samples, together.
func churnQuarter(samples []churnSample) latencies {
	var l latencies
	for _, s := range samples {
		l = append(l, s.claim...)
	}
	return l
}
