package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
)

// TestPrinterFlushes: a table is written out every flushRows rows, not
// held until the end.
func TestPrinterFlushes(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	p := (&options{output: "table"}).newPrinter(&out, "A", "B")
	for i := range flushRows - 1 {
		require.NoError(t, p.row(nil, strconv.Itoa(i), "x"))
	}
	assert.Empty(t, out.String(), "held until flushRows rows")
	require.NoError(t, p.row(nil, "last", "x"))
	assert.Equal(t, flushRows+1, strings.Count(out.String(), "\n"), "the header and flushRows rows")
	require.NoError(t, p.row(nil, "more", "x"))
	require.NoError(t, p.flush())
	assert.True(t, strings.HasSuffix(out.String(), "more  x\n"), out.String())
}

// TestScanStreams: scan writes its first rows while the store is still
// being read. The scan reads Redis through a proxy that the test cuts as
// soon as the first row arrives: a scan that printed only at its end
// would have finished (exit 0) by then; a streaming one is cut mid-way
// and fails (exit 1).
func TestScanStreams(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	s := newRedisStore(t, c, prefix)
	const n = 1500
	for i := range n {
		completed(t, s, "s:"+strconv.Itoa(i), nil)
	}
	proxy := tcpproxy.Start(t, c.Options().Addr)

	pr, pw := io.Pipe()
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Run(t.Context(), []string{"--redis", "redis://" + proxy.Addr(), "--prefix", prefix, "--timeout", "2s", "scan"},
			Streams{In: strings.NewReader(""), Out: pw, Err: &errb})
		_ = pw.Close()
	}()
	first := make(chan string, 1)
	go func() {
		br := bufio.NewReader(pr)
		line, _ := br.ReadString('\n')
		line2, _ := br.ReadString('\n')
		first <- line + line2
		_, _ = io.Copy(io.Discard, br)
	}()
	rows := testenv.Recv(t, first, "the first rows of the scan")
	assert.Regexp(t, `^KEY +STATE.*\ns:\d+ +completed`, rows)
	proxy.Cut()
	assert.Equal(t, ExitError, testenv.Recv(t, done, "the scan's end"), "the scan had not finished when its first rows came: %s", errb.String())
	assert.Contains(t, errb.String(), proxy.Addr())
}

// TestProgress: the scan commands draw a progress count on stderr when it
// is a terminal, and nothing when it is not.
func TestProgress(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	s := newRedisStore(t, c, prefix)
	for i := range 5 {
		completed(t, s, "p:"+strconv.Itoa(i), nil)
	}
	failed(t, s, "p:f", "boom")
	flags := []string{"--redis", redisURL(t), "--prefix", prefix}
	for _, args := range [][]string{
		{"scan"},
		{"stats"},
		{"forget", "--namespace", "p", "--state", "failed", "--dry-run"},
	} {
		for _, terminal := range []bool{false, true} {
			var out, errb bytes.Buffer
			code := Run(context.Background(), with(flags, args...), Streams{In: strings.NewReader(""), Out: &out, Err: &errb, Terminal: terminal})
			require.Equal(t, 0, code, errb.String())
			bar := strings.Contains(errb.String(), "records")
			assert.Equal(t, terminal, bar, "%q terminal %v: stderr %q", args, terminal, errb.String())
		}
	}
}
