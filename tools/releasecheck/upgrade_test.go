package main

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/dedup-go/dedup/tools/internal/repo"
	"github.com/dedup-go/dedup/tools/internal/testrepo"
)

const root = "github.com/dedup-go/dedup"

func gomod(path string) string { return "module " + path + "\n\ngo 1.26.0\n" }

// oldRepo makes a repository laid out as at 0.1.0 (gateway a package of
// middleware/grpc, redisstore one of the root, outbox one of the root),
// tagged v0.1.0 as release.sh tags it.
func oldRepo(t *testing.T) string {
	dir := testrepo.New(t, map[string]string{
		"go.mod":                             gomod(root),
		"dedup.go":                           "package dedup\n",
		"store/redisstore/redisstore.go":     "package redisstore\n",
		"outbox/outbox.go":                   "package outbox\n",
		"internal/redistest/redistest.go":    "package redistest\n",
		"adapters/nats/go.mod":               gomod(root + "/adapters/nats"),
		"adapters/nats/nats.go":              "package nats\n",
		"store/pgstore/go.mod":               gomod(root + "/store/pgstore"),
		"store/pgstore/pgstore.go":           "package pgstore\n",
		"middleware/grpc/go.mod":             gomod(root + "/middleware/grpc"),
		"middleware/grpc/grpc.go":            "package grpc\n",
		"middleware/grpc/gateway/gateway.go": "package gateway\n",
		"examples/go.mod":                    gomod(root + "/examples"),
	})
	for _, tag := range []string{"v0.1.0", "adapters/nats/v0.1.0", "store/pgstore/v0.1.0", "middleware/grpc/v0.1.0"} {
		testrepo.Git(t, dir, "tag", "-a", tag, "-m", tag)
	}
	return dir
}

func planOf(t *testing.T, dir string) (plan, []string, []string) {
	t.Helper()
	ctx := context.Background()
	fromMods, err := taggedModules(ctx, dir, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := repo.Modules(dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := fs.ReadFile(users, "testdata/upgrade/main.go")
	if err != nil {
		t.Fatal(err)
	}
	u := upgrade{repoDir: dir, rootPath: root, version: "v1.0.0-rc.1", from: "v0.1.0", libs: repo.Libraries(mods), fromMods: fromMods}
	p, notes, problems, err := u.makePlan(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	return p, notes, problems
}

func TestTaggedModules(t *testing.T) {
	dir := oldRepo(t)
	testrepo.Git(t, dir, "tag", "-a", "adapters/nats/v0.2.0", "-m", "later")
	mods, err := taggedModules(context.Background(), dir, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range mods {
		got = append(got, m.Dir+" "+m.Path+" "+m.Tag)
	}
	want := []string{
		". " + root + " v0.1.0",
		"adapters/nats " + root + "/adapters/nats adapters/nats/v0.1.0",
		"middleware/grpc " + root + "/middleware/grpc middleware/grpc/v0.1.0",
		"store/pgstore " + root + "/store/pgstore store/pgstore/v0.1.0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("taggedModules:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := taggedModules(context.Background(), dir, "v0.3.0"); err == nil {
		t.Error("no module tagged v0.3.0: no error")
	}
}

func TestPlanGatewayCarvedRedisstoreNotYet(t *testing.T) {
	dir := oldRepo(t)
	testrepo.Commit(t, dir, "gateway module", map[string]string{
		"middleware/grpc/gateway/go.mod": gomod(root + "/middleware/grpc/gateway"),
	})
	p, notes, problems := planOf(t, dir)
	if len(problems) > 0 {
		t.Fatalf("problems: %q", problems)
	}
	if len(p.carves) != 1 || p.carves[0] != (activeCarve{pkg: root + "/middleware/grpc/gateway", module: root + "/middleware/grpc/gateway", parent: root + "/middleware/grpc"}) {
		t.Errorf("carves = %+v", p.carves)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "store/redisstore is no module of its own at HEAD (a package of module "+root+")") {
		t.Errorf("notes = %q", notes)
	}
	if want := []string{root, root + "/adapters/nats", root + "/middleware/grpc", root + "/store/pgstore"}; !slices.Equal(p.required, want) {
		t.Errorf("required = %q, want %q", p.required, want)
	}
	if want := []string{root + "/middleware/grpc"}; !slices.Equal(p.parents, want) {
		t.Errorf("parents = %q, want %q", p.parents, want)
	}
	if want := []string{root, root + "/adapters/nats", root + "/store/pgstore"}; !slices.Equal(p.others, want) {
		t.Errorf("others = %q, want %q", p.others, want)
	}
}

func TestPlanBothCarved(t *testing.T) {
	dir := oldRepo(t)
	testrepo.Commit(t, dir, "modules", map[string]string{
		"middleware/grpc/gateway/go.mod": gomod(root + "/middleware/grpc/gateway"),
		"store/redisstore/go.mod":        gomod(root + "/store/redisstore"),
		// A test helper's module under internal is no carve-out a user
		// can meet.
		"internal/redistest/go.mod": gomod(root + "/internal/redistest"),
	})
	p, notes, problems := planOf(t, dir)
	if len(problems) > 0 || len(notes) > 0 {
		t.Fatalf("problems %q, notes %q", problems, notes)
	}
	var mods []string
	for _, c := range p.carves {
		mods = append(mods, c.module)
	}
	if want := []string{root + "/middleware/grpc/gateway", root + "/store/redisstore"}; !slices.Equal(mods, want) {
		t.Errorf("carved-out modules = %q, want %q", mods, want)
	}
	if want := []string{root + "/middleware/grpc", root}; !slices.Equal(p.parents, want) {
		t.Errorf("parents = %q, want %q", p.parents, want)
	}
	if want := []string{root + "/adapters/nats", root + "/store/pgstore"}; !slices.Equal(p.others, want) {
		t.Errorf("others = %q, want %q", p.others, want)
	}
}

func TestPlanUnlistedCarveOut(t *testing.T) {
	dir := oldRepo(t)
	testrepo.Commit(t, dir, "outbox module", map[string]string{
		"outbox/go.mod": gomod(root + "/outbox"),
	})
	_, _, problems := planOf(t, dir)
	if len(problems) != 1 || !strings.Contains(problems[0], "module "+root+"/outbox holds packages of "+root+" at v0.1.0") || !strings.Contains(problems[0], "carvedOut") {
		t.Errorf("problems = %q, want one on outbox", problems)
	}
}

func TestErrLine(t *testing.T) {
	err := strings.Join([]string{
		"go build -trimpath -o user .: exit status 1",
		"go: downloading github.com/dedup-go/dedup/middleware/grpc/gateway v1.0.0-rc.1",
		"main.go:14:2: ambiguous import: found package github.com/dedup-go/dedup/middleware/grpc/gateway in multiple modules:",
		"\tgithub.com/dedup-go/dedup/middleware/grpc v0.1.0 (/m/grpc@v0.1.0/gateway)",
		"\tgithub.com/dedup-go/dedup/middleware/grpc/gateway v1.0.0-rc.1 (/m/gateway@v1.0.0-rc.1)",
	}, "\n")
	got := errLine(errorString(err))
	want := "main.go:14:2: ambiguous import: found package github.com/dedup-go/dedup/middleware/grpc/gateway in multiple modules: " +
		"github.com/dedup-go/dedup/middleware/grpc v0.1.0 (/m/grpc@v0.1.0/gateway) github.com/dedup-go/dedup/middleware/grpc/gateway v1.0.0-rc.1 (/m/gateway@v1.0.0-rc.1)"
	if got != want {
		t.Errorf("errLine:\n%s\nwant\n%s", got, want)
	}
	if got := errLine(errorString("go get x: exit status 1\ngo: downloading x v1\ngo: x@v1: not found")); got != "go: x@v1: not found" {
		t.Errorf("errLine = %q", got)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
