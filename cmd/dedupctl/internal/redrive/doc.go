// Package redrive sends the dead letters of a dedup adapter back to where
// they came from: a NATS JetStream stream ([NewNATS]), a RabbitMQ queue
// ([NewRabbitMQ]) or a Kafka topic ([NewKafka]), each a [Source] that
// reads the letters of one pass, republishes an original with the
// broker's confirm and removes a letter.
//
// [Run] takes each letter through the same steps, in this order:
//
//  1. What cannot come back is left in place and reported as skipped: a
//     letter without the adapters' Dedup-* headers (nor RabbitMQ's
//     x-death), one whose body was cut (Truncated), one whose destination
//     is unknown, and, unless Options.Force, one dead-lettered for a reason
//     a copy would only meet again (no-key, invalid-key, undecodable,
//     key-reused).
//  2. The record of its key decides: a completed record means a copy was
//     handled already, so the letter is removed and nothing republished; a
//     processing record under a live lease means a copy is running now, so
//     the letter is left for a later run; a failed record is forgotten
//     (store.Inspector.DeleteIf, failed records only, so that no live
//     claim is ever deleted); no record, or a lease that has ended, lets
//     the copy go.
//  3. The original is republished, and the broker's confirm awaited.
//  4. Only then is the letter removed.
//
// # Crashes
//
// Stopped anywhere (a SIGKILL), a run leaves each letter either in place or
// removed after its copy was confirmed; never removed without a copy. A
// letter whose copy was confirmed but which was not removed yet is read
// again by the next run, and two things keep its message from running twice
// downstream: the next run reads the record first (a copy handled by then
// left a completed record: the letter is removed, nothing republished),
// and a copy republished a second time meets the receiver's record like any
// duplicate (the first copy to claim the key runs; the other is answered
// from the record). On NATS, a copy republished within the stream's
// duplicate window is also dropped by the stream itself when the original
// had a Nats-Msg-Id.
package redrive
