package mysqlstore_test

import (
	"io"
	"log"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The driver logs the connections it finds broken, which the outage
	// tests break on purpose.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	if os.Getenv(childEnv) != "" {
		// A consumer process that TestExactlyOnceKilled starts and kills:
		// it never returns normally, so no leak check.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
