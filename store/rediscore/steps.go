package rediscore

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/dedup-go/dedup/store"
)

// Step records (store.StepStore) are kept apart from the record, whose
// packed string (record.go) every script parses and which the hot path
// (a new message's Acquire and Complete, their batches) writes without
// them: a message's step records are one Redis hash, at its steps key
// (StepsKey), a field per step (the step's name, its value as it is), and
// one more field, named "" (no step name is empty), holding the record's
// creation time, its 6 bytes at offset 23, then the retention SaveStep
// was given (ms, in decimal). The creation time is kept by every takeover
// and retry of the record and is new for a fresh one, so it tells the
// hash of the record as it is from one left behind by an earlier record
// of the key that expired: the scripts and the Inspector ignore a hash
// whose creation time is not the record's, and SaveStep replaces it.
//
// The steps key lives in the record key's Cluster slot, so that a script
// may read and write both atomically, whatever the user's keys hold: it
// is the record key after a hash tag chosen for that slot ("{" + SlotTag
// + "}") and before ":steps". Its expiry is kept at or after the
// record's plus that retention by every call that touches both keys
// (SaveStep, LoadSteps, Extend, Release): a completed or failed record,
// kept for the retention, keeps its steps as long as it lives, and a
// takeover finds them. Complete, the hot path, leaves the steps key as it
// is: the steps of a completed record live at least until the record's
// expiry as the last of those calls left it plus the retention, which is
// as long as the completed record lives when Complete's retention is
// SaveStep's and no takeover came after the last of them (a takeover's
// holder that completes without reading, writing or extending its claim
// may leave the steps to expire before its record). A steps key outliving
// its record is never read: the next record of the key has another
// creation time. Delete and DeleteIf delete both keys.

// StepsSuffix ends every steps key.
const StepsSuffix = ":steps"

// MetaField is the field of a steps hash that holds the record's creation
// time and the retention: no step name is empty.
const MetaField = ""

// Slots is the number of slots of a Redis Cluster.
const Slots = 16384

// Slot returns the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag, the part between its first '{' and the first '}' after it when
// that part is not empty, or else of the whole key, modulo Slots. The
// clients compute it too, but keep it in internal packages.
func Slot(key string) int {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % Slots
}

func indexByte(s string, c byte) int {
	for i := range len(s) {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0, no
// reflection), Redis Cluster's.
func crc16(s string) uint16 {
	var crc uint16
	for i := range len(s) {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// tagAlphabet is what a slot's tag is made of: no '{', '}' or ':'.
const tagAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// maxTagLen bounds the tags: every slot has one of at most 3 characters
// of tagAlphabet (62 of 1, 3448 of 2, the rest of 3: TestSlotTags).
const maxTagLen = 3

// slotTags returns the tag of every slot: the first string of
// tagAlphabet, shortest first, whose CRC16 falls in the slot. It is found
// once, on the first call (under a millisecond), and takes 48 KiB.
var slotTags = sync.OnceValue(func() *[Slots][maxTagLen]byte {
	t := new([Slots][maxTagLen]byte)
	left := Slots
	var buf [maxTagLen]byte
	var walk func(n, depth int) bool
	walk = func(n, depth int) bool {
		if depth == n {
			slot := crc16(string(buf[:n])) % Slots
			if t[slot][0] == 0 {
				copy(t[slot][:], buf[:n])
				left--
			}
			return left == 0
		}
		for i := range len(tagAlphabet) {
			buf[depth] = tagAlphabet[i]
			if walk(n, depth+1) {
				return true
			}
		}
		return false
	}
	for n := 1; n <= maxTagLen; n++ {
		if walk(n, 0) {
			return t
		}
	}
	panic("rediscore: a Cluster slot has no tag") // TestSlotTags: never
})

// SlotTag returns a short hash tag (without its braces) that Redis puts in
// slot: Slot("{" + SlotTag(slot) + "}") == slot.
func SlotTag(slot int) string {
	t := &slotTags()[slot%Slots]
	n := 0
	for n < maxTagLen && t[n] != 0 {
		n++
	}
	return string(t[:n])
}

// StepsKeyOf returns the Redis key of the step records of the record at
// redisKey: "{" + the tag of its slot + "}", redisKey, then StepsSuffix,
// in the same Cluster slot as redisKey whatever it holds. It never starts
// with a store's prefix followed by the layout (the tag has no ':'), so a
// Scan of records never meets one.
func StepsKeyOf(redisKey string) string {
	return string(AppendStepsKey(make([]byte, 0, StepsKeyLen(len(redisKey))), redisKey))
}

// StepsKeyLen bounds the length of the steps key of a Redis key of n
// bytes (the longest tag counted).
func StepsKeyLen(n int) int {
	return maxTagLen + 2 + n + len(StepsSuffix)
}

// AppendStepsKey appends StepsKeyOf(redisKey) to b, for a caller that
// builds its keys and arguments in one allocation.
func AppendStepsKey(b []byte, redisKey string) []byte {
	t := &slotTags()[Slot(redisKey)]
	b = append(b, '{')
	for _, c := range t {
		if c != 0 {
			b = append(b, c)
		}
	}
	b = append(b, '}')
	b = append(b, redisKey...)
	return append(b, StepsSuffix...)
}

// StepsKey returns the Redis key of the step records of key.
func (c *Core) StepsKey(key string) string { return StepsKeyOf(c.RedisKey(key)) }

// CheckSaveStep checks the arguments of SaveStep: a name that is not a
// step name (store.StepNameValid) is an error matching
// store.ErrInvalidConfig; a zero token never holds a key, so it gets
// ErrLeaseLost without a round trip.
func (c *Core) CheckSaveStep(req store.SaveStepRequest) error {
	if req.Key == "" {
		return c.EmptyKey("save step")
	}
	if !store.StepNameValid(req.Name) {
		return fmt.Errorf("%s: save step %q of %q: %w: a step name is 1 to %d bytes of valid UTF-8", c.Pkg, req.Name, req.Key, store.ErrInvalidConfig, store.MaxStepNameLen)
	}
	if req.Token.IsZero() {
		return c.LeaseLost("save step", req.Key)
	}
	return nil
}

// CheckLoadSteps checks the arguments of LoadSteps.
func (c *Core) CheckLoadSteps(req store.StepsRequest) error {
	if req.Key == "" {
		return c.EmptyKey("load steps")
	}
	if req.Token.IsZero() {
		return c.LeaseLost("load steps", req.Key)
	}
	return nil
}

// SaveStepArgs returns the arguments of SaveStepScript after the token:
// the name, and the retention in ms in decimal (a retention that is not
// positive counts as none).
func SaveStepArgs(req store.SaveStepRequest) (name, retention string) {
	return req.Name, strconv.FormatInt(MS(max(req.Retention, 0)), 10)
}

// LoadedSteps reads the answer of LoadStepsScript: the hash's fields and
// values in turn (the meta field among them) or, for an odd count, not
// an answer of the script (ok false). Values are copied.
func LoadedSteps(flat []string) (_ []store.StepRecord, ok bool) {
	if len(flat)%2 != 0 {
		return nil, false
	}
	var out []store.StepRecord
	for i := 0; i < len(flat); i += 2 {
		if flat[i] == MetaField {
			continue
		}
		out = append(out, store.StepRecord{Name: flat[i], Value: []byte(flat[i+1])})
	}
	return out, true
}

// RecordSteps returns the step records in hash (the steps key's fields and
// values, as HGETALL answers them) of the record whose Redis value is v,
// or none when the hash is not that record's (left behind by an earlier
// record of the key, or no hash at all). Values are copied.
func RecordSteps(v string, hash map[string]string) []store.StepRecord {
	meta, ok := hash[MetaField]
	if !ok || len(v) < HeaderLen || len(meta) < timeLen || meta[:timeLen] != v[createdAt:createdAt+timeLen] {
		return nil
	}
	var out []store.StepRecord
	for name, value := range hash {
		if name != MetaField {
			out = append(out, store.StepRecord{Name: name, Value: []byte(value)})
		}
	}
	return out
}
