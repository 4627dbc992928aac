package cli

import "github.com/spf13/cobra"

// newForgetCmd is the forget command. TODO(helper): built in its own change.
func newForgetCmd(o *options) *cobra.Command {
	return &cobra.Command{Use: "forget", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErrorf("forget: not built yet") }}
}
