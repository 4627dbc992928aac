// Command apicount counts the exported names of every library package of
// the repository: top-level types, functions, constants and variables, and
// the exported methods of exported types (fields are not counted). It
// prints a table, one row per package, and the total:
//
//	go -C tools run ./apicount ..
//
// Packages under internal/, cmd/, examples/, bench/ and tools/, test files
// and main packages are left out: they are nobody's API. With -max N, it
// exits 1 when the root package exports more than N names (a budget that
// make test checks).
package main

import (
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// count is one package's exported names, by kind.
type count struct {
	dir                        string
	types, funcs, consts, vars int
	methods                    int
}

func (c count) total() int { return c.types + c.funcs + c.consts + c.vars + c.methods }

func main() {
	maxRoot := flag.Int("max", 0, "fail when the root package exports more than this many names (0: no budget)")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	counts, err := countAll(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(2)
	}
	fmt.Printf("%-36s %6s %6s %6s %6s %8s %6s\n", "package", "types", "funcs", "consts", "vars", "methods", "total")
	sum := 0
	for _, c := range counts {
		fmt.Printf("%-36s %6d %6d %6d %6d %8d %6d\n", c.dir, c.types, c.funcs, c.consts, c.vars, c.methods, c.total())
		sum += c.total()
	}
	fmt.Printf("%-36s %44d\n", "all packages", sum)
	if *maxRoot > 0 {
		for _, c := range counts {
			if c.dir == "." && c.total() > *maxRoot {
				fmt.Fprintf(os.Stderr, "apicount: the root package exports %d names, over its budget of %d\n", c.total(), *maxRoot)
				os.Exit(1)
			}
		}
	}
}

// skipped reports whether the directory rel holds no library package.
func skipped(rel string) bool {
	for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
		switch part {
		case "internal", "cmd", "examples", "bench", "tools", "testdata", ".git":
			return true
		}
	}
	return false
}

func countAll(root string) ([]count, error) {
	var out []count
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if rel != "." && (skipped(rel) || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		c, ok, err := countDir(path)
		if err != nil {
			return err
		}
		if ok {
			c.dir = filepath.ToSlash(rel)
			out = append(out, c)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].dir < out[j].dir })
	return out, err
}

// countDir counts the package in dir; ok is false when there is none (or
// it is a main package).
func countDir(dir string) (count, bool, error) {
	// The package's files as the go command selects them: build
	// constraints applied, test files left out.
	bp, err := build.ImportDir(dir, 0)
	var noGo *build.NoGoError
	if errors.As(err, &noGo) || err == nil && (bp.Name == "main" || len(bp.GoFiles) == 0) {
		return count{}, false, nil
	}
	if err != nil {
		return count{}, false, err
	}
	fset := token.NewFileSet()
	files := make([]*ast.File, 0, len(bp.GoFiles))
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return count{}, false, err
		}
		files = append(files, f)
	}
	var c count
	exportedTypes := map[string]bool{}
	for _, f := range files {
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, spec := range g.Specs {
					if ts := spec.(*ast.TypeSpec); ts.Name.IsExported() {
						exportedTypes[ts.Name.Name] = true
					}
				}
			}
		}
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					c.funcs++
				} else if exportedTypes[receiverType(d.Recv.List[0].Type)] {
					c.methods++
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							c.types++
							c.methods += interfaceMethods(s)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if !n.IsExported() {
								continue
							}
							if d.Tok == token.CONST {
								c.consts++
							} else {
								c.vars++
							}
						}
					}
				}
			}
		}
	}
	return c, true, nil
}

// interfaceMethods counts the exported methods an exported interface
// declares: each is a promise to implementers and callers alike.
func interfaceMethods(s *ast.TypeSpec) int {
	it, ok := s.Type.(*ast.InterfaceType)
	if !ok {
		return 0
	}
	n := 0
	for _, m := range it.Methods.List {
		if _, ok := m.Type.(*ast.FuncType); ok {
			for _, name := range m.Names {
				if name.IsExported() {
					n++
				}
			}
		}
	}
	return n
}

// receiverType is the name of a method's receiver type, without pointer
// or type parameters.
func receiverType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
