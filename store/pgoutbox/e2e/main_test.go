package e2e_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childRoleEnv); role != "" {
		// A process of TestEndToEnd, killed with SIGKILL: it never
		// returns normally, so no leak check.
		os.Exit(childMain(role))
	}
	goleak.VerifyTestMain(m)
}
