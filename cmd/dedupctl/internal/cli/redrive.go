package cli

import "github.com/spf13/cobra"

// newRedriveCmd is the redrive command. TODO(helper): built in its own change.
func newRedriveCmd(o *options) *cobra.Command {
	return &cobra.Command{Use: "redrive", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErrorf("redrive: not built yet") }}
}
