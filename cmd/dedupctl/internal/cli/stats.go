package cli

import "github.com/spf13/cobra"

// newStatsCmd is the stats command. TODO(helper): built in its own change.
func newStatsCmd(o *options) *cobra.Command {
	return &cobra.Command{Use: "stats", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErrorf("stats: not built yet") }}
}
