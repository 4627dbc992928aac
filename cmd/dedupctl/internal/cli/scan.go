package cli

import "github.com/spf13/cobra"

// newScanCmd is the scan command. TODO(helper): built in its own change.
func newScanCmd(o *options) *cobra.Command {
	return &cobra.Command{Use: "scan", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErrorf("scan: not built yet") }}
}
