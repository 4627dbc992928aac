package clock_test

import (
	"fmt"
	"time"

	"github.com/dedup-go/dedup/clock"
)

// A fake clock runs what is due when it is advanced, on the advancing
// goroutine: a 30-second lease heartbeat beats every 10 seconds of fake time,
// without sleeping.
func ExampleFake() {
	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var beat func()
	beat = func() {
		fmt.Println("beat at", c.Now().Format("15:04:05"))
		c.AfterFunc(10*time.Second, beat)
	}
	c.AfterFunc(10*time.Second, beat)

	c.Advance(35 * time.Second)
	fmt.Println("now", c.Now().Format("15:04:05"), "pending", c.Pending())
	// Output:
	// beat at 00:00:10
	// beat at 00:00:20
	// beat at 00:00:30
	// now 00:00:35 pending 1
}
