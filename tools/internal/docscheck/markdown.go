package docscheck

import (
	"bytes"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// doc is one parsed markdown file.
type doc struct {
	path       string // absolute
	src        []byte
	lineStarts []int
	anchors    map[string]bool
	links      []link
	snippets   []snippet
}

// link is a link or image destination.
type link struct {
	dest  string
	line  int
	image bool
}

// snippet is a fenced Go block marked complete.
type snippet struct {
	code []byte
	line int // the line of the code's first line
}

var md = goldmark.New(goldmark.WithExtensions(extension.GFM))

// htmlAnchor finds the anchors an HTML tag declares: <a id="x">, <a name="x">.
var htmlAnchor = regexp.MustCompile(`(?i)\s(?:id|name)\s*=\s*"([^"]+)"`)

func parseFile(path string) (*doc, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := &doc{path: path, src: src, lineStarts: []int{0}, anchors: map[string]bool{}}
	for i, b := range src {
		if b == '\n' {
			d.lineStarts = append(d.lineStarts, i+1)
		}
	}
	root := md.Parser().Parse(text.NewReader(src))
	var slugs slugger
	err = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			d.anchors[slugs.slug(plainText(n, src))] = true
		case *ast.Link:
			d.links = append(d.links, link{dest: string(n.Destination), line: d.lineOf(n)})
		case *ast.Image:
			d.links = append(d.links, link{dest: string(n.Destination), line: d.lineOf(n), image: true})
		case *ast.HTMLBlock:
			var b bytes.Buffer
			for i := 0; i < n.Lines().Len(); i++ {
				seg := n.Lines().At(i)
				b.Write(seg.Value(src))
			}
			d.addHTMLAnchors(b.Bytes())
		case *ast.RawHTML:
			for i := 0; i < n.Segments.Len(); i++ {
				seg := n.Segments.At(i)
				d.addHTMLAnchors(seg.Value(src))
			}
		case *ast.FencedCodeBlock:
			if !complete(n, src) {
				return ast.WalkSkipChildren, nil
			}
			s := snippet{line: d.lineOf(n)}
			if n.Lines().Len() > 0 {
				s.line = d.line(n.Lines().At(0).Start)
			}
			for i := 0; i < n.Lines().Len(); i++ {
				seg := n.Lines().At(i)
				s.code = append(s.code, seg.Value(src)...)
			}
			d.snippets = append(d.snippets, s)
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return d, err
}

// complete reports whether a fenced block's info string marks it a
// complete Go file: "go run".
func complete(n *ast.FencedCodeBlock, src []byte) bool {
	if n.Info == nil {
		return false
	}
	f := strings.Fields(string(n.Info.Segment.Value(src)))
	return len(f) >= 2 && f[0] == "go" && f[1] == "run"
}

func (d *doc) addHTMLAnchors(html []byte) {
	for _, m := range htmlAnchor.FindAllSubmatch(html, -1) {
		d.anchors[string(m[1])] = true
	}
}

// line returns the 1-based line of byte offset off.
func (d *doc) line(off int) int {
	return sort.Search(len(d.lineStarts), func(i int) bool { return d.lineStarts[i] > off })
}

// lineOf returns the line of node n: its position if the parser recorded
// one, else that of its first text, else that of its nearest block.
func (d *doc) lineOf(n ast.Node) int {
	if p := n.Pos(); p >= 0 {
		return d.line(p)
	}
	var off = -1
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if t, ok := c.(*ast.Text); ok && entering {
			off = t.Segment.Start
			return ast.WalkStop, nil
		}
		return ast.WalkContinue, nil
	})
	if off >= 0 {
		return d.line(off)
	}
	for b := n; b != nil; b = b.Parent() {
		if b.Type() == ast.TypeBlock && b.Lines().Len() > 0 {
			return d.line(b.Lines().At(0).Start)
		}
	}
	return 1
}

// plainText returns the text of n as a browser shows it: the text of its
// inlines, code spans included, images and raw HTML left out.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Image, *ast.RawHTML:
			return ast.WalkSkipChildren, nil
		case *ast.Text:
			b.Write(c.Value(src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.AutoLink:
			b.Write(c.Label(src))
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// slugger makes GitHub's heading anchors: lower case, every character but
// letters, digits, marks, connector punctuation ("_"), "-" and " " dropped,
// spaces turned to "-"; the second heading with the same slug gets "-1",
// the third "-2", and so on.
type slugger struct{ seen map[string]int }

func (s *slugger) slug(heading string) string {
	if s.seen == nil {
		s.seen = map[string]int{}
	}
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.Pc):
			b.WriteRune(r)
		}
	}
	base := b.String()
	slug := base
	for {
		if _, taken := s.seen[slug]; !taken {
			break
		}
		s.seen[base]++
		slug = base + "-" + strconv.Itoa(s.seen[base])
	}
	s.seen[slug] = 0
	return slug
}
