package cli

import (
	"encoding/json"
	"io"
	"strings"
	"text/tabwriter"
)

// printer writes a command's rows: an aligned table with a header line,
// or one JSON object per line (--output json).
type printer struct {
	json    bool
	enc     *json.Encoder
	tw      *tabwriter.Writer
	headers []string
	started bool
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
	return p
}

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
		clean[i] = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(c)
	}
	_, err := io.WriteString(p.tw, strings.Join(clean, "\t")+"\n")
	return err
}

// flush writes out what the table holds; a table is aligned over the rows
// written before each flush.
func (p *printer) flush() error {
	if p.tw != nil {
		return p.tw.Flush()
	}
	return nil
}
