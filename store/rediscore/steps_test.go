package rediscore

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dedup-go/dedup/store"
)

// TestSlot pins Redis Cluster's key slots: CRC16/XMODEM's check value,
// and the hash tag rules of the Cluster specification, with slots that
// CLUSTER KEYSLOT answers (redisstore's TestStepsKeySlotInCluster checks
// many more against a live Cluster).
func TestSlot(t *testing.T) {
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"foo":                  12182,
		"bar":                  5061,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"user1000":             3443,
		"foo{}{bar}":           int(crc16("foo{}{bar}")) % Slots, // an empty tag: the whole key
		"foo{{bar}}zap":        int(crc16("{bar")) % Slots,       // from the first '{' to the first '}'
		"foo{bar}{zap}":        5061,                             // the first tag only
		"a}b{":                 int(crc16("a}b{")) % Slots,       // no '}' after the '{'
		"":                     0,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestSlotTags: every slot has a tag of 1 to maxTagLen characters of
// tagAlphabet that Redis puts in it, and the table is what its comment
// says.
func TestSlotTags(t *testing.T) {
	lens := map[int]int{}
	for slot := range Slots {
		tag := SlotTag(slot)
		lens[len(tag)]++
		if tag == "" || len(tag) > maxTagLen || strings.Trim(tag, tagAlphabet) != "" {
			t.Fatalf("SlotTag(%d) = %q", slot, tag)
		}
		if got := Slot("{" + tag + "}"); got != slot {
			t.Fatalf("SlotTag(%d) = %q, in slot %d", slot, tag, got)
		}
	}
	if lens[1] != 62 || lens[2] != 3448 || lens[3] != Slots-62-3448 {
		t.Errorf("tags by length: %v", lens)
	}
}

// TestStepsKey: a steps key is in its record key's slot whatever the key
// holds, and is never under the store's prefix and layout (a Scan of
// records never meets one).
func TestStepsKey(t *testing.T) {
	for _, prefix := range []string{"dedup:", "{app}:", "}{", "{}", "{a}{a}"} {
		c := Core{Prefix: prefix}
		for _, key := range []string{"orders:1", "orders:{42}", "a}b", "{", "}", "{}x", "x{y", "é{ü}", strings.Repeat("k", 300)} {
			rk, sk := c.RedisKey(key), c.StepsKey(key)
			if Slot(sk) != Slot(rk) {
				t.Errorf("prefix %q key %q: steps key %q in slot %d, record key %q in %d", prefix, key, sk, Slot(sk), rk, Slot(rk))
			}
			if strings.HasPrefix(sk, prefix+Layout) {
				t.Errorf("prefix %q key %q: steps key %q is under the records' prefix", prefix, key, sk)
			}
			if len(sk) > StepsKeyLen(len(rk)) || string(AppendStepsKey([]byte("x"), rk)) != "x"+sk {
				t.Errorf("prefix %q key %q: steps key %q, bound %d", prefix, key, sk, StepsKeyLen(len(rk)))
			}
			if !strings.HasSuffix(sk, rk+StepsSuffix) || sk != StepsKeyOf(rk) {
				t.Errorf("prefix %q key %q: steps key %q", prefix, key, sk)
			}
		}
	}
}

func TestCheckSaveStep(t *testing.T) {
	c := Core{Pkg: "x"}
	ok := store.SaveStepRequest{Key: "k", Token: store.NewToken(), Name: "charge"}
	if err := c.CheckSaveStep(ok); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", strings.Repeat("n", store.MaxStepNameLen+1), "\xff"} {
		req := ok
		req.Name = name
		if err := c.CheckSaveStep(req); !errors.Is(err, store.ErrInvalidConfig) {
			t.Errorf("name %q: %v", name, err)
		}
	}
	req := ok
	req.Token = store.Token{}
	if err := c.CheckSaveStep(req); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("zero token: %v", err)
	}
	if err := c.CheckLoadSteps(store.StepsRequest{Key: "k"}); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("zero token: %v", err)
	}
}

// TestRecordSteps: the Inspector reads a steps hash only when it is the
// record's (its meta field starts with the record's creation time), and
// never returns the meta field.
func TestRecordSteps(t *testing.T) {
	token := store.NewToken()
	v := PackProcessing(token, 2000, 1000, "")
	meta := TimeString(1000) + "60000"
	got := RecordSteps(v, map[string]string{MetaField: meta, "charge": "a", "notify": ""})
	slices.SortFunc(got, func(a, b store.StepRecord) int { return strings.Compare(a.Name, b.Name) })
	if len(got) != 2 || got[0].Name != "charge" || string(got[0].Value) != "a" || got[1].Name != "notify" {
		t.Fatalf("RecordSteps = %v", got)
	}
	for name, hash := range map[string]map[string]string{
		"an earlier record's": {MetaField: TimeString(999) + "60000", "charge": "a"},
		"no meta field":       {"charge": "a"},
		"no hash":             nil,
	} {
		if got := RecordSteps(v, hash); got != nil {
			t.Errorf("%s: RecordSteps = %v, want none", name, got)
		}
	}

	recs, ok := LoadedSteps([]string{MetaField, meta, "charge", "a"})
	if !ok || len(recs) != 1 || recs[0].Name != "charge" || string(recs[0].Value) != "a" {
		t.Fatalf("LoadedSteps = %v, %v", recs, ok)
	}
	if _, ok := LoadedSteps([]string{"charge"}); ok {
		t.Error("LoadedSteps of an odd count")
	}
}
