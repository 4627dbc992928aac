package dedupredisstream_test

const childEnv = "DEDUP_REDISSTREAM_CHILD"

func childMain() int { return 0 }
