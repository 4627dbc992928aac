package dedupfranz_test

const (
	brokerProcessEnv   = "DEDUPFRANZ_BROKER_PROCESS"
	consumerProcessEnv = "DEDUPFRANZ_CONSUMER_PROCESS"
)

func brokerProcessMain() int   { return 2 }
func consumerProcessMain() int { return 2 }
