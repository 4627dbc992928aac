package cli

import "github.com/spf13/cobra"

// newGetCmd is the get command. TODO(helper): built in its own change.
func newGetCmd(o *options) *cobra.Command {
	return &cobra.Command{Use: "get", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErrorf("get: not built yet") }}
}
