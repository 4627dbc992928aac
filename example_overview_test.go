package dedup_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log"
	"os"
	"strings"
	"testing"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// The package overview's snippet, run as written: the body of overview is
// the code block of doc.go's "Receiver" section (TestOverviewIsDocSnippet
// keeps them the same).
func Example() {
	if err := overview(context.Background()); err != nil {
		log.Fatal(err)
	}
	// Output:
	// processed charged o-1
	// duplicate charged o-1
}

func overview(ctx context.Context) error {
	type Order struct{ ID string }
	store, err := memstore.New(nil) // one process; redisstore shares records between replicas
	if err != nil {
		return err
	}
	charge := func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		return "charged " + m.Body.ID, nil // the effect: once per order id
	}
	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
		&dedup.Config{Namespace: "billing"})
	if err != nil {
		return err
	}
	msg := &dedup.Message[Order]{Body: Order{ID: "o-1"}} // a broker adapter builds it from a delivery
	// The broker delivers it twice:
	for range 2 {
		res, err := rcv.Handle(ctx, msg) // res.Status: processed, duplicate, in-flight or bypassed
		if err != nil {
			return err // not done: the broker is to redeliver it
		}
		fmt.Println(res.Status, res.Value)
	}
	return nil
}

// TestOverviewIsDocSnippet: the code block of the package overview
// (doc.go, section "Receiver") is the body of overview, line for line, so
// the snippet readers copy is the code Example compiles and runs.
func TestOverviewIsDocSnippet(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	doc, err := parser.ParseFile(fset, "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	var snippet []string
	in := false
	for _, line := range strings.Split(doc.Doc.Text(), "\n") {
		switch {
		case line == "# Receiver":
			in = true
		case in && strings.HasPrefix(line, "\t"):
			snippet = append(snippet, strings.TrimPrefix(line, "\t"))
		case in && len(snippet) > 0 && line != "":
			in = false
		}
	}
	if len(snippet) == 0 {
		t.Fatal(`doc.go: no code block in the "Receiver" section`)
	}

	src, err := os.ReadFile("example_overview_test.go")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(fset, "example_overview_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var body []string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "overview" {
			from := fset.Position(fn.Body.Lbrace).Offset + 1
			to := fset.Position(fn.Body.Rbrace).Offset
			for _, line := range strings.Split(strings.Trim(string(src[from:to]), "\n"), "\n") {
				body = append(body, strings.TrimPrefix(line, "\t"))
			}
		}
	}
	if got, want := strings.Join(snippet, "\n"), strings.Join(body, "\n"); got != want {
		t.Fatalf("doc.go's overview snippet differs from the body of overview in example_overview_test.go:\n--- doc.go\n%s\n--- overview\n%s", got, want)
	}
}
