// Command docscheck checks the repository's markdown documentation: every
// relative link and image resolves, every #anchor names a heading, and
// every Go code block fenced as
//
//	```go run
//	package main
//	...
//	```
//
// (info string "go run": a complete Go file, package clause included)
// compiles against the repository's library modules. See package
// internal/docscheck for the rules.
//
// Usage:
//
//	go -C tools run ./docscheck [PATH...]
//
// A directory PATH is a repository root: its README.md and docs/**/*.md are
// checked (the first directory given is the root links starting with "/"
// resolve from and whose modules snippets may import). A file PATH is one
// more markdown file to check. With no PATH, the root is the git work tree
// holding the current directory. It prints one line per problem,
// FILE:LINE: what, and exits 1 if there is any.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/dedup-go/dedup/tools/internal/docscheck"
	"github.com/dedup-go/dedup/tools/internal/repo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	var root string
	var files []string
	for _, a := range args {
		info, err := os.Stat(a)
		if err != nil {
			fmt.Fprintln(os.Stderr, "docscheck:", err)
			return 2
		}
		if !info.IsDir() {
			files = append(files, a)
			continue
		}
		if root == "" {
			root = a
		}
		fs, err := docscheck.DefaultFiles(a)
		if err != nil {
			fmt.Fprintln(os.Stderr, "docscheck:", err)
			return 2
		}
		files = append(files, fs...)
	}
	if root == "" {
		wd, err := os.Getwd()
		if err == nil {
			root, err = repo.Toplevel(ctx, wd)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "docscheck: no repository root:", err)
			return 2
		}
		if len(args) == 0 {
			if files, err = docscheck.DefaultFiles(root); err != nil {
				fmt.Fprintln(os.Stderr, "docscheck:", err)
				return 2
			}
		}
	}
	problems, st, err := docscheck.Check(ctx, docscheck.Options{Root: root, Files: files})
	if err != nil {
		fmt.Fprintln(os.Stderr, "docscheck:", err)
		return 1
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	fmt.Printf("docscheck: %d files, %d links, %d %q snippets: ", st.Files, st.Links, st.Snippets, docscheck.Marker)
	if len(problems) > 0 {
		fmt.Printf("FAIL, %d problem(s)\n", len(problems))
		return 1
	}
	fmt.Println("ok")
	return 0
}
