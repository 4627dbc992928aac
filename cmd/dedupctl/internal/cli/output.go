package cli

import (
	"encoding/json"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// A table is flushed (written out, aligned over the rows since the last
// flush) once it holds flushRows rows, or at the first row written
// flushEvery after the last flush, so that a long scan shows its rows as
// they come instead of at its end.
const (
	flushRows  = 200
	flushEvery = 500 * time.Millisecond
)

// printer writes a command's rows: an aligned table with a header line,
// or one JSON object per line (--output json).
type printer struct {
	json    bool
	enc     *json.Encoder
	tw      *tabwriter.Writer
	headers []string
	started bool
	pending int       // rows written since the last flush
	flushed time.Time // when the table was last flushed
}

// newPrinter returns a printer of rows with the given column headers.
func (o *options) newPrinter(w io.Writer, headers ...string) *printer {
	p := &printer{json: o.jsonOutput(), headers: headers}
	if p.json {
		p.enc = json.NewEncoder(w)
		p.enc.SetEscapeHTML(false)
	} else {
		p.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	}
	p.flushed = time.Now()
	return p
}

// cellSpaces turns what would break a table's line or column into spaces.
var cellSpaces = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

// row writes one row: v as a JSON object, or cells in the table (one per
// header; tabs and newlines in a cell are shown as spaces).
func (p *printer) row(v any, cells ...string) error {
	if p.json {
		return p.enc.Encode(v)
	}
	if !p.started {
		p.started = true
		if _, err := io.WriteString(p.tw, strings.Join(p.headers, "\t")+"\n"); err != nil {
			return err
		}
	}
	clean := make([]string, len(cells))
	for i, c := range cells {
		clean[i] = cellSpaces.Replace(c)
	}
	if _, err := io.WriteString(p.tw, strings.Join(clean, "\t")+"\n"); err != nil {
		return err
	}
	if p.pending++; p.pending >= flushRows || time.Since(p.flushed) >= flushEvery {
		return p.flush()
	}
	return nil
}

// flush writes out what the table holds; a table is aligned over the rows
// written before each flush.
func (p *printer) flush() error {
	p.pending, p.flushed = 0, time.Now()
	if p.tw != nil {
		return p.tw.Flush()
	}
	return nil
}
