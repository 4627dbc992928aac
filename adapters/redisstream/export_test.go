package dedupredisstream

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// DelConsumer runs the script that removes a dead consumer, for the tests
// to check its own guard (the Consumer also looks before it calls it).
func DelConsumer(ctx context.Context, c redis.UniversalClient, stream, group, name string) (int, error) {
	return delConsumerScript.Run(ctx, c, []string{stream}, group, name, 0).Int()
}

// DueMilli is dueMilli, the next-attempt time as it is recorded.
var DueMilli = dueMilli
