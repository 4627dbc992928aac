// Package delivery is the vocabulary of what happens to one delivery of a
// message, shared by users, adapters and observers: where it came from
// ([Origin]), what was decided about it ([Decision]: [Ack], [Retry] or
// [DeadLetter], with a [Reason]), and the [Event] an [Observer] hears once
// the adapter carried the decision out.
//
// Application code meets it in two places: Config.Observer (metrics, logs,
// tracing of one's own) and the dead-letter counts of dedup.Stats, keyed by
// Reason. The dedupotel module is an Observer.
package delivery
