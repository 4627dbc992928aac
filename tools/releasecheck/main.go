// Command releasecheck checks that the library modules of a repository, as
// tagged by scripts/release.sh, can be used the way a user uses them: from
// a module proxy, at the released version, with no replace and no
// workspace. scripts/release-check.sh runs it on a throwaway clone in which
// release.sh has just made the tags:
//
//	releasecheck -repo CLONE [-version v1.0.0-rc.1] [-from v0.1.0] [-work DIR]
//
// It checks that every library module is tagged at VERSION and that its
// go.mod there requires every module of the repository at VERSION, then
// writes every library module at its tag into a directory in the GOPROXY
// file:// layout (list, .info, .mod, and a zip made by golang.org/x/mod/zip
// from the tagged revision); with -from, every module tagged at that older
// version too. Then, in fresh modules outside the repository that share one
// module cache of their own, it runs the go command through
//
//	GOPROXY=file://PROXY,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)
//
// (the module cache already on the machine serves the third-party modules
// it holds, so the check runs offline when they are all there):
//
//   - for each integration module, go get MODULE@VERSION, a build of a
//     small program that uses the module's API (testdata/users), its go
//     list -m all, and a check of the packages it builds (go list -deps):
//     those of this repository come from the proxy at VERSION, the
//     module's own client is there, and no client of another integration
//     is;
//   - for every other library module but the commands (the root, otel, ...),
//     go get MODULE@VERSION and a build of a program that imports each of
//     its public packages (not internal, not main);
//   - for each command module, go install PATH@latest, and the binary's
//     modules (go version -m);
//   - with -from, the upgrade run (upgrade.go): testdata/upgrade built at
//     the older version, then upgraded to VERSION in two ways, with the
//     packages carved out of a module since then (carvedOut) resolving to
//     their new module, never to two ("ambiguous import").
//
// It prints one summary line per check and exits 1 if any failed.
package main

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"

	"github.com/dedup-go/dedup/tools/internal/modproxy"
	"github.com/dedup-go/dedup/tools/internal/repo"
)

//go:embed testdata/users testdata/upgrade
var users embed.FS

// Families of client libraries, by import path root: a user of one
// integration must build none of the others'.
var (
	kafkaPkgs = []string{"github.com/segmentio/kafka-go", "github.com/twmb/franz-go", "github.com/IBM/sarama"}
	natsPkgs  = []string{"github.com/nats-io"}
	amqpPkgs  = []string{"github.com/rabbitmq", "github.com/streadway/amqp"}
	pgxPkgs   = []string{"github.com/jackc"}
	mysqlPkgs = []string{"github.com/go-sql-driver/mysql"}
	grpcPkgs  = []string{"google.golang.org/grpc"}
	// grpc-gateway: only a user of middleware/grpc/gateway builds it.
	gatewayPkgs = []string{"github.com/grpc-ecosystem/grpc-gateway"}
	// The Redis clients: the root module's redisstore is on go-redis,
	// store/rueidisstore on rueidis; a user of one builds none of the
	// other's.
	goredisPkgs = []string{"github.com/redis/go-redis"}
	rueidisPkgs = []string{"github.com/redis/rueidis"}
)

// user is one integration's user program.
type user struct {
	name string // its directory in testdata/users
	dir  string // the integration module's directory in the repository
	// must lists import paths the program must build, besides the
	// integration's package and the root package.
	must []string
	// forbid lists, by name, families of packages the program must not
	// build.
	forbid map[string][]string
}

var userSpecs = []user{
	{name: "kafka", dir: "adapters/kafka", must: []string{"github.com/segmentio/kafka-go"},
		forbid: map[string][]string{"nats": natsPkgs, "rabbitmq": amqpPkgs, "pgx": pgxPkgs, "mysql": mysqlPkgs, "grpc": grpcPkgs, "rueidis": rueidisPkgs}},
	{name: "nats", dir: "adapters/nats", must: []string{"github.com/nats-io/nats.go"},
		forbid: map[string][]string{"kafka": kafkaPkgs, "rabbitmq": amqpPkgs, "pgx": pgxPkgs, "mysql": mysqlPkgs, "grpc": grpcPkgs, "rueidis": rueidisPkgs}},
	{name: "rabbitmq", dir: "adapters/rabbitmq", must: []string{"github.com/rabbitmq/amqp091-go"},
		forbid: map[string][]string{"kafka": kafkaPkgs, "nats": natsPkgs, "pgx": pgxPkgs, "mysql": mysqlPkgs, "grpc": grpcPkgs, "rueidis": rueidisPkgs}},
	{name: "pgstore", dir: "store/pgstore", must: []string{"github.com/jackc/pgx/v5"},
		forbid: map[string][]string{"kafka": kafkaPkgs, "nats": natsPkgs, "rabbitmq": amqpPkgs, "mysql": mysqlPkgs, "grpc": grpcPkgs, "rueidis": rueidisPkgs}},
	{name: "mysqlstore", dir: "store/mysqlstore", must: []string{"github.com/go-sql-driver/mysql"},
		forbid: map[string][]string{"kafka": kafkaPkgs, "nats": natsPkgs, "rabbitmq": amqpPkgs, "pgx": pgxPkgs, "grpc": grpcPkgs, "rueidis": rueidisPkgs}},
	{name: "pgoutbox", dir: "store/pgoutbox", must: []string{"github.com/jackc/pgx/v5", "github.com/dedup-go/dedup/store/pgstore", "github.com/dedup-go/dedup/outbox"},
		forbid: map[string][]string{"kafka": kafkaPkgs, "nats": natsPkgs, "rabbitmq": amqpPkgs, "mysql": mysqlPkgs, "grpc": grpcPkgs, "rueidis": rueidisPkgs}},
	{name: "rueidisstore", dir: "store/rueidisstore", must: []string{"github.com/redis/rueidis"},
		forbid: map[string][]string{"go-redis": goredisPkgs, "kafka": kafkaPkgs, "nats": natsPkgs, "rabbitmq": amqpPkgs, "pgx": pgxPkgs, "mysql": mysqlPkgs, "grpc": grpcPkgs}},
	{name: "http", dir: "middleware/http",
		forbid: map[string][]string{"kafka": kafkaPkgs, "nats": natsPkgs, "rabbitmq": amqpPkgs, "pgx": pgxPkgs, "mysql": mysqlPkgs, "grpc": grpcPkgs, "rueidis": rueidisPkgs}},
	{name: "grpc", dir: "middleware/grpc", must: []string{"google.golang.org/grpc"},
		forbid: map[string][]string{"grpc-gateway": gatewayPkgs, "kafka": kafkaPkgs, "nats": natsPkgs, "rabbitmq": amqpPkgs, "pgx": pgxPkgs, "mysql": mysqlPkgs, "rueidis": rueidisPkgs}},
	{name: "gateway", dir: "middleware/grpc/gateway", must: []string{"github.com/grpc-ecosystem/grpc-gateway/v2/runtime", "github.com/dedup-go/dedup/middleware/grpc"},
		forbid: map[string][]string{"kafka": kafkaPkgs, "nats": natsPkgs, "rabbitmq": amqpPkgs, "pgx": pgxPkgs, "mysql": mysqlPkgs, "rueidis": rueidisPkgs}},
}

func main() {
	repoDir := flag.String("repo", "", "the repository `dir` whose tags to check (required)")
	version := flag.String("version", "v1.0.0-rc.1", "the released `version`")
	from := flag.String("from", "", "an older `version`, tagged in the repository, to run the upgrade from (none: no upgrade run)")
	work := flag.String("work", "", "a `dir` for the proxy, module cache and user modules (default: a temporary directory, removed at the end)")
	flag.Parse()
	if *repoDir == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *repoDir, *version, *from, *work); err != nil {
		fmt.Fprintln(os.Stderr, "release-check: FAIL:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, repoDir, version, from, work string) (err error) {
	repoDir, err = filepath.Abs(repoDir)
	if err != nil {
		return err
	}
	if work == "" {
		if work, err = os.MkdirTemp("", "release-check-"); err != nil {
			return err
		}
		defer func() {
			if rerr := removeAll(work); rerr != nil && err == nil {
				err = rerr
			}
		}()
	}
	mods, err := repo.Modules(repoDir)
	if err != nil {
		return err
	}
	libs := repo.Libraries(mods)
	var failed []string
	var summary []string
	var versions []modproxy.Version
	for _, m := range libs {
		problems, err := checkTaggedMod(ctx, repoDir, m, mods, version)
		if err != nil {
			return err
		}
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "release-check: go.mod:", p)
			summary = append(summary, "FAIL go.mod   "+p)
		}
		if len(problems) > 0 {
			failed = append(failed, m.ModFile())
		}
		versions = append(versions, modproxy.Version{Path: m.Path, Version: version, Subdir: m.Subdir(), Revision: m.Tag(version)})
	}
	var fromMods []taggedModule
	if from != "" {
		if semver.Compare(from, version) >= 0 {
			return fmt.Errorf("-from %s: not older than %s", from, version)
		}
		if fromMods, err = taggedModules(ctx, repoDir, from); err != nil {
			return err
		}
		for _, m := range fromMods {
			versions = append(versions, modproxy.Version{Path: m.Path, Version: from, Subdir: m.subdir(), Revision: m.Tag})
		}
	}
	proxy := filepath.Join(work, "proxy")
	if err := modproxy.Add(ctx, proxy, repoDir, versions); err != nil {
		return err
	}
	fmt.Printf("release-check: proxy of %d modules at %s", len(libs), version)
	if from != "" {
		fmt.Printf(" and %d at %s", len(fromMods), from)
	}
	fmt.Printf(" in %s\n", proxy)

	upstream, err := goEnv(ctx, "GOPROXY")
	if err != nil {
		return err
	}
	cache, err := goEnv(ctx, "GOMODCACHE")
	if err != nil {
		return err
	}
	goproxy := "file://" + filepath.ToSlash(proxy)
	if cache != "" {
		goproxy += ",file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download"))
	}
	if upstream != "" {
		goproxy += "," + upstream
	}
	rootPath := libs[0].Path
	env := append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOPROXY="+goproxy,
		"GOMODCACHE="+filepath.Join(work, "modcache"),
		"GONOSUMDB="+parentOf(rootPath),
		"GOPRIVATE=", "GONOPROXY=", "GOINSECURE=",
		"GOTOOLCHAIN=local",
	)
	fmt.Printf("release-check: GOPROXY=%s\n", goproxy)

	for _, u := range userSpecs {
		m, ok := findModule(libs, u.dir)
		if !ok {
			failed = append(failed, u.name)
			summary = append(summary, fmt.Sprintf("FAIL %-8s no library module in %s", u.name, u.dir))
			continue
		}
		start := time.Now()
		line, err := checkUser(ctx, env, filepath.Join(work, "users", u.name), u, m, rootPath, version)
		took := time.Since(start).Round(100 * time.Millisecond)
		if err != nil {
			fmt.Fprintf(os.Stderr, "release-check: %s: %v\n", u.name, err)
			failed = append(failed, u.name)
			summary = append(summary, fmt.Sprintf("FAIL %-8s %s@%s: %v (%s)", u.name, m.Path, version, errLine(err), took))
			continue
		}
		summary = append(summary, fmt.Sprintf("ok   %-8s %s@%s: %s (%s)", u.name, m.Path, version, line, took))
	}
	// The library modules no user program covers: go get, and a build of
	// their public packages.
	for _, m := range libs {
		if m.Command || slices.ContainsFunc(userSpecs, func(u user) bool { return u.dir == m.Dir }) {
			continue
		}
		start := time.Now()
		name := shortName(rootPath, m.Path)
		line, err := checkPackages(ctx, env, filepath.Join(work, "packages", strings.ReplaceAll(name, "/", "-")), m, rootPath, version)
		took := time.Since(start).Round(100 * time.Millisecond)
		if err != nil {
			fmt.Fprintf(os.Stderr, "release-check: %s: %v\n", name, err)
			failed = append(failed, name)
			summary = append(summary, fmt.Sprintf("FAIL %-8s %s@%s: %v (%s)", name, m.Path, version, errLine(err), took))
			continue
		}
		summary = append(summary, fmt.Sprintf("ok   %-8s %s@%s: %s (%s)", name, m.Path, version, line, took))
	}
	for _, m := range libs {
		if !m.Command {
			continue
		}
		start := time.Now()
		name := path.Base(m.Path)
		line, err := checkInstall(ctx, env, filepath.Join(work, "install", name), m, rootPath, version)
		took := time.Since(start).Round(100 * time.Millisecond)
		if err != nil {
			fmt.Fprintf(os.Stderr, "release-check: %s: %v\n", name, err)
			failed = append(failed, name)
			summary = append(summary, fmt.Sprintf("FAIL %-8s go install %s@latest: %v (%s)", name, m.Path, errLine(err), took))
			continue
		}
		summary = append(summary, fmt.Sprintf("ok   %-8s go install %s@latest: %s (%s)", name, m.Path, line, took))
	}
	if from != "" {
		start := time.Now()
		lines, ok := checkUpgrade(ctx, upgrade{
			env: env, dir: filepath.Join(work, "upgrade"), repoDir: repoDir, rootPath: rootPath,
			version: version, from: from, libs: libs, fromMods: fromMods,
		})
		took := time.Since(start).Round(100 * time.Millisecond)
		if !ok {
			failed = append(failed, "upgrade")
		}
		for i, l := range lines {
			if i == len(lines)-1 {
				l += fmt.Sprintf(" (%s)", took)
			}
			summary = append(summary, l)
		}
	}
	fmt.Println("\n== release-check summary")
	for _, s := range summary {
		fmt.Println(s)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d checks failed: %s", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

// checkTaggedMod fails unless module m is tagged at version, and returns
// the problems of its go.mod there: a requirement on a module of this
// repository at another version than version (a user would need a version
// that is not released, or, for an older version of a module a package
// was carved out of, could get that package from two modules), or, in a
// command module, a replace directive.
func checkTaggedMod(ctx context.Context, repoDir string, m repo.Module, mods []repo.Module, version string) ([]string, error) {
	tag := m.Tag(version)
	data, err := repo.GitRaw(ctx, repoDir, "show", tag+":"+m.ModFile())
	if err != nil {
		return nil, fmt.Errorf("%s is not tagged %s (did release.sh run?): %w", m.Path, tag, err)
	}
	f, err := modfile.ParseLax(tag+":"+m.ModFile(), data, nil)
	if err != nil {
		return nil, err
	}
	var problems []string
	if m.Command && len(f.Replace) > 0 {
		problems = append(problems, fmt.Sprintf("%s at %s has replace directives: go install %s@%s would refuse it", m.ModFile(), tag, m.Path, version))
	}
	for _, r := range f.Require {
		if repo.Own(mods, r.Mod.Path) && r.Mod.Version != version {
			problems = append(problems, fmt.Sprintf("%s at %s requires %s %s, not %s", m.ModFile(), tag, r.Mod.Path, r.Mod.Version, version))
		}
	}
	return problems, nil
}

// checkUser builds user u of module m in dir and checks its packages. It
// returns the summary of what it saw.
func checkUser(ctx context.Context, env []string, dir string, u user, m repo.Module, rootPath, version string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := fs.ReadFile(users, "testdata/users/"+u.name+"/main.go")
	if err != nil {
		return "", err
	}
	gomod := fmt.Sprintf("module example.com/releasecheck/%s\n\ngo 1.26.0\n", u.name)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		return "", err
	}
	gocmd := func(args ...string) (string, error) { return goIn(ctx, env, dir, args...) }
	fmt.Printf("\n== %s: go get %s@%s\n", u.name, m.Path, version)
	if _, err := gocmd("get", m.Path+"@"+version); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "user")
	if _, err := gocmd("build", "-trimpath", "-o", bin, "."); err != nil {
		return "", err
	}
	all, err := gocmd("list", "-m", "all")
	if err != nil {
		return "", err
	}
	fmt.Printf("%s: go list -m all\n%s", u.name, indent(all))
	pkgs, problems, err := listDeps(ctx, env, dir, rootPath, version)
	if err != nil {
		return "", err
	}
	must := append([]string{m.Path, rootPath}, u.must...)
	for _, p := range must {
		if _, ok := pkgs[p]; !ok {
			problems = append(problems, "package "+p+" is not built")
		}
	}
	var none []string
	for _, fam := range sortedKeys(u.forbid) {
		none = append(none, fam)
		var bad []string
		for p := range pkgs {
			for _, root := range u.forbid[fam] {
				if under(p, root) {
					bad = append(bad, p)
				}
			}
		}
		if len(bad) > 0 {
			slices.Sort(bad)
			more := ""
			if len(bad) > 3 {
				more = fmt.Sprintf(" and %d more", len(bad)-3)
				bad = bad[:3]
			}
			problems = append(problems, fmt.Sprintf("builds %s packages: %s%s", fam, strings.Join(bad, ", "), more))
		}
	}
	out, err := runProgram(ctx, bin)
	if err != nil {
		problems = append(problems, fmt.Sprintf("the program failed: %v\n%s", err, out))
	} else {
		fmt.Printf("%s: the program prints:\n%s", u.name, indent(out))
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "\n"))
	}
	return fmt.Sprintf("go list -m all: %d modules; %d packages built, among them %s; none of %s", strings.Count(all, "\n")-1, len(pkgs), strings.Join(must, ", "), strings.Join(none, ", ")), nil
}

// checkPackages gets module m at version in a fresh module in dir, as a
// user of a module with no program in testdata/users, and builds a program
// that imports each of its public packages (neither internal nor main; a
// module with none is only got),
// checking that every package of this repository it builds comes from the
// proxy at version. It returns the summary of what it saw.
func checkPackages(ctx context.Context, env []string, dir string, m repo.Module, rootPath, version string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := shortName(rootPath, m.Path)
	gomod := fmt.Sprintf("module example.com/releasecheck/packages/%s\n\ngo 1.26.0\n", strings.ReplaceAll(name, "/", "-"))
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return "", err
	}
	gocmd := func(args ...string) (string, error) { return goIn(ctx, env, dir, args...) }
	fmt.Printf("\n== %s: go get %s@%s, and a program importing its public packages\n", name, m.Path, version)
	if _, err := gocmd("get", m.Path+"@"+version); err != nil {
		return "", err
	}
	// m.Path/... matches the packages of every module of the build list
	// under that path: keep m's own. -e: a directory with only tests is
	// listed with an error, and no Go files.
	out, err := gocmd("list", "-e", "-f", "{{.ImportPath}}\t{{.Name}}\t{{with .Module}}{{.Path}}{{end}}\t{{len .GoFiles}}\t{{with .Error}}{{.Err}}{{end}}", m.Path+"/...")
	if err != nil {
		return "", err
	}
	var public []string
	var problems []string
	// Trim the newline only: the last field is often empty.
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 5 || f[2] != m.Path || internal(f[0]) || f[1] == "main" {
			continue
		}
		if f[3] == "0" {
			continue // tests only
		}
		if f[4] != "" {
			problems = append(problems, fmt.Sprintf("package %s: %s", f[0], f[4]))
			continue
		}
		public = append(public, f[0])
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "\n"))
	}
	if len(public) == 0 {
		// A module of internal packages only (a test helper shared by
		// this repository's modules) has nothing a user imports.
		return "go get only: no public package", nil
	}
	slices.Sort(public)
	var src strings.Builder
	src.WriteString("// Imports every public package of " + m.Path + ".\npackage main\n\nimport (\n")
	for _, p := range public {
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644); err != nil {
		return "", err
	}
	fmt.Printf("%s: %d public packages\n%s", name, len(public), indent(strings.Join(public, "\n")))
	if _, err := gocmd("build", "-trimpath", "-o", filepath.Join(dir, "user"), "."); err != nil {
		return "", err
	}
	all, err := gocmd("list", "-m", "all")
	if err != nil {
		return "", err
	}
	fmt.Printf("%s: go list -m all\n%s", name, indent(all))
	pkgs, deps, err := listDeps(ctx, env, dir, rootPath, version)
	if err != nil {
		return "", err
	}
	problems = append(problems, deps...)
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "\n"))
	}
	plural := "s"
	if len(public) == 1 {
		plural = ""
	}
	return fmt.Sprintf("go list -m all: %d modules; %d packages built, among them its %d public package%s", strings.Count(all, "\n")-1, len(pkgs), len(public), plural), nil
}

// checkInstall installs command module m with go install PATH@latest
// from the proxy, as its users do, runs it with --help, and checks with
// go version -m that every module of this repository in the binary is
// version, not replaced. It returns the summary of what it saw.
func checkInstall(ctx context.Context, env []string, dir string, m repo.Module, rootPath, version string) (string, error) {
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	fmt.Printf("\n== go install %s@latest\n", m.Path)
	// -trimpath: the module cache is new in every run, and a build
	// that records its paths would compile every package again.
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", m.Path+"@latest")
	cmd.Dir = dir
	cmd.Env = append(env, "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@latest: %w\n%s", m.Path, err, out)
	}
	exe := filepath.Join(bin, path.Base(m.Path))
	info, err := exec.CommandContext(ctx, "go", "version", "-m", exe).Output()
	if err != nil {
		return "", fmt.Errorf("go version -m %s: %w", exe, err)
	}
	fmt.Print(indent(string(info)))
	var own []string
	var problems []string
	for _, l := range strings.Split(string(info), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || (f[0] != "mod" && f[0] != "dep" && f[0] != "=>") || !under(f[1], parentOf(rootPath)) {
			continue
		}
		if f[0] == "=>" || f[2] != version {
			problems = append(problems, fmt.Sprintf("%s %s is not %s from the proxy", f[1], strings.Join(f[2:], " "), version))
			continue
		}
		own = append(own, f[1])
	}
	out, err := exec.CommandContext(ctx, exe, "--help").CombinedOutput()
	if err != nil {
		problems = append(problems, fmt.Sprintf("%s --help failed: %v\n%s", exe, err, out))
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "\n"))
	}
	return fmt.Sprintf("%d modules of this repository at %s in the binary; --help runs", len(own), version), nil
}

// goIn runs the go command with args in dir and returns its standard
// output; the error holds both outputs.
func goIn(ctx context.Context, env []string, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// pkgModule is the module a package is built from.
type pkgModule struct {
	Path, Version, Replace string
}

// listDeps lists the packages the program in dir builds (go list -deps)
// with their modules, and returns, as problems, those of this repository
// that do not come from the proxy at version.
func listDeps(ctx context.Context, env []string, dir, rootPath, version string) (map[string]pkgModule, []string, error) {
	deps, err := goIn(ctx, env, dir, "list", "-deps", "-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}\t{{.Version}}\t{{with .Replace}}{{.Path}}{{end}}{{end}}", ".")
	if err != nil {
		return nil, nil, err
	}
	var problems []string
	pkgs := map[string]pkgModule{}
	for _, l := range strings.Split(strings.TrimRight(deps, "\n"), "\n") {
		f := strings.Split(l, "\t")
		var pm pkgModule
		if len(f) == 4 {
			pm = pkgModule{Path: f[1], Version: f[2], Replace: f[3]}
		}
		pkgs[f[0]] = pm
		if under(pm.Path, parentOf(rootPath)) && (pm.Version != version || pm.Replace != "") {
			problems = append(problems, fmt.Sprintf("package %s comes from module %s %s%s, not %s from the proxy", f[0], pm.Path, pm.Version, replaced(pm.Replace), version))
		}
	}
	return pkgs, problems, nil
}

// runProgram runs the program bin and returns its combined output.
func runProgram(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin).CombinedOutput()
	return string(out), err
}

// internal reports whether import path p has an element "internal".
func internal(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "internal")
}

// shortName names module path p for the summary: "dedup" for the root
// module github.com/dedup-go/dedup, "dedup/otel" for the one in otel.
func shortName(rootPath, p string) string {
	return path.Base(rootPath) + strings.TrimPrefix(p, rootPath)
}

func findModule(libs []repo.Module, dir string) (repo.Module, bool) {
	for _, m := range libs {
		if m.Dir == dir {
			return m, true
		}
	}
	return repo.Module{}, false
}

func goEnv(ctx context.Context, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// under reports whether import or module path p is root or below it.
func under(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }

// parentOf returns the path of the repository's owner:
// github.com/dedup-go for github.com/dedup-go/dedup.
func parentOf(rootPath string) string {
	if i := strings.LastIndex(rootPath, "/"); i > 0 {
		return rootPath[:i]
	}
	return rootPath
}

func replaced(p string) string {
	if p == "" {
		return ""
	}
	return " => " + p
}

func sortedKeys(m map[string][]string) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

// errLine is the line of a failed check's error that says what failed:
// the ambiguous import with its modules, or the go command's first line
// of output.
func errLine(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		if strings.Contains(l, "ambiguous import") {
			s := strings.TrimSpace(l)
			for _, m := range lines[i+1:] {
				if !strings.HasPrefix(m, "\t") {
					break
				}
				s += " " + strings.TrimSpace(m)
			}
			return s
		}
	}
	// The go command's progress lines say nothing of the failure.
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "go: downloading ") && !strings.HasPrefix(l, "go: finding ") &&
			!strings.HasPrefix(l, "go: found ") && !strings.HasPrefix(l, "go: added ") && !strings.HasPrefix(l, "go: upgraded ") {
			return l
		}
	}
	return lines[0]
}

// removeAll removes dir, whose module cache may be read-only.
func removeAll(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
