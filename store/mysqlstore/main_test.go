package mysqlstore_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// A consumer process that TestExactlyOnceKilled starts and kills:
		// it never returns normally, so no leak check.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
