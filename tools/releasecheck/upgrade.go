package main

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/dedup-go/dedup/tools/internal/repo"
)

// The upgrade run: a user who built testdata/upgrade against the modules
// tagged at an older version (-from) upgrades to the new one. A package
// carved out of a module into a module of its own since then is the trap:
// if the build holds an older version of the module that still contains
// the package beside the new module, the go command finds the package in
// both and fails with "ambiguous import". The release avoids it by making
// the new module require the new version of the module it was carved out
// of, which no longer contains the package; the upgrade run shows it, both
// ways a user upgrades:
//
//	(a) at the old version: go get of every module of that version the
//	    program imports from, go build, run;
//	(b) go get of the carved-out modules only, at the new version: the
//	    carved-out packages resolve to their new modules (go list), whose
//	    requirements raise the modules they left; then go get of the other
//	    modules the program uses (0.1.0's adapters do not compile against
//	    the v1 root), but never of those the packages left; go build, run;
//	(c) from (a) again: go get of the modules the packages left and of the
//	    others, not of the carved-out ones; go mod tidy finds the
//	    carved-out modules; go build, run.
//
// After (b) and (c), every package of this repository the program builds
// comes from the new version, each carved-out package from its new module.

// carve is one package carved out of the module that held it at the
// version upgraded from into a module of its own.
type carve struct {
	pkg    string // the package's directory in the repository
	module string // the directory of its module now
}

// carvedOut lists the packages of the version upgraded from that are now
// in modules of their own; testdata/upgrade imports each of them. An entry
// whose module is not (yet) there at HEAD is left out of the run with a
// note: the package is still where it was, and the program gets it from
// there. A library module at HEAD that was a package of another module at
// the old version and is not listed here fails the run.
var carvedOut = []carve{
	{pkg: "middleware/grpc/gateway", module: "middleware/grpc/gateway"},
	{pkg: "store/redisstore", module: "store/redisstore"},
}

// taggedModule is a module tagged at a version in the repository.
type taggedModule struct {
	Dir  string // "." for the root
	Path string // as its go.mod at the tag declares
	Tag  string
}

func (m taggedModule) subdir() string {
	if m.Dir == "." {
		return ""
	}
	return m.Dir
}

// taggedModules returns the modules tagged at version in the repository at
// repoDir (tags VERSION and DIR/VERSION), the root first.
func taggedModules(ctx context.Context, repoDir, version string) ([]taggedModule, error) {
	out, err := repo.Git(ctx, repoDir, "tag", "--list")
	if err != nil {
		return nil, err
	}
	var mods []taggedModule
	for _, t := range strings.Fields(out) {
		dir := ""
		switch {
		case t == version:
			dir = "."
		case strings.HasSuffix(t, "/"+version):
			dir = strings.TrimSuffix(t, "/"+version)
		default:
			continue
		}
		data, err := repo.GitRaw(ctx, repoDir, "show", t+":"+path.Join(dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		p := modfile.ModulePath(data)
		if p == "" {
			return nil, fmt.Errorf("%s:%s: no module directive", t, path.Join(dir, "go.mod"))
		}
		mods = append(mods, taggedModule{Dir: dir, Path: p, Tag: t})
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("no module is tagged %s", version)
	}
	slices.SortFunc(mods, func(a, b taggedModule) int { return strings.Compare(a.Dir, b.Dir) })
	return mods, nil
}

// upgrade is what checkUpgrade needs.
type upgrade struct {
	env      []string
	dir      string // the run's work directory
	repoDir  string
	rootPath string
	version  string // upgraded to
	from     string // upgraded from
	libs     []repo.Module
	fromMods []taggedModule
}

// activeCarve is a carve whose module is there at HEAD.
type activeCarve struct {
	pkg    string // import path
	module string // its module's path now
	parent string // the path of the module holding it at the old version
}

// plan is the upgrade run's modules.
type plan struct {
	required []string // the old version's modules the program imports from
	carves   []activeCarve
	parents  []string // the modules the carved-out packages left
	others   []string // required, less parents
}

// makePlan works out the run's modules from the program's imports,
// carvedOut, the modules at HEAD and those tagged at the old version. It
// returns notes on the carvedOut entries left out, and the problems that
// fail the run.
func (u upgrade) makePlan(ctx context.Context, src []byte) (plan, []string, []string, error) {
	var p plan
	var notes, problems []string
	f, err := parser.ParseFile(token.NewFileSet(), "testdata/upgrade/main.go", src, parser.ImportsOnly)
	if err != nil {
		return p, nil, nil, err
	}
	imports := map[string]bool{}
	for _, is := range f.Imports {
		ip, err := strconv.Unquote(is.Path.Value)
		if err != nil {
			return p, nil, nil, err
		}
		if !under(ip, u.rootPath) {
			continue
		}
		imports[ip] = true
		m, ok := u.fromModule(ip)
		if !ok {
			problems = append(problems, fmt.Sprintf("testdata/upgrade imports %s, in no module tagged %s", ip, u.from))
			continue
		}
		if !slices.Contains(p.required, m.Path) {
			p.required = append(p.required, m.Path)
		}
	}
	for _, c := range carvedOut {
		ip := u.rootPath + "/" + c.pkg
		parent, ok := u.fromModule(ip)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("carvedOut: %s is in no module tagged %s", ip, u.from))
			continue
		case parent.Dir == c.module:
			problems = append(problems, fmt.Sprintf("carvedOut: %s is a module of its own at %s already", parent.Path, u.from))
			continue
		}
		if !imports[ip] {
			problems = append(problems, fmt.Sprintf("testdata/upgrade does not import %s (carvedOut)", ip))
		}
		m, ok := findModule(u.libs, c.module)
		if !ok {
			holder := "no library module"
			if h, ok := headModule(u.libs, ip); ok {
				holder = "module " + h.Path
			}
			notes = append(notes, fmt.Sprintf("%s is no module of its own at HEAD (a package of %s): left out of the carved-out modules; the program gets it from there", c.module, holder))
			continue
		}
		p.carves = append(p.carves, activeCarve{pkg: ip, module: m.Path, parent: parent.Path})
		if !slices.Contains(p.parents, parent.Path) {
			p.parents = append(p.parents, parent.Path)
		}
	}
	for _, r := range p.required {
		if !slices.Contains(p.parents, r) {
			p.others = append(p.others, r)
		}
	}
	// A library module that was a package of another module at the old
	// version is a carve-out the run must know.
	for _, m := range u.libs {
		if m.Dir == "." || internal(m.Dir) || slices.ContainsFunc(u.fromMods, func(t taggedModule) bool { return t.Path == m.Path }) ||
			slices.ContainsFunc(carvedOut, func(c carve) bool { return c.module == m.Dir }) {
			continue
		}
		parent, ok := u.fromModule(m.Path)
		if !ok {
			continue
		}
		files, err := repo.Git(ctx, u.repoDir, "ls-tree", "-r", "--name-only", parent.Tag, "--", m.Dir+"/")
		if err != nil {
			return p, nil, nil, err
		}
		for _, file := range strings.Fields(files) {
			if strings.HasSuffix(file, ".go") && !strings.HasSuffix(file, "_test.go") && !internal(file) && !slices.Contains(strings.Split(file, "/"), "testdata") {
				problems = append(problems, fmt.Sprintf("module %s holds packages of %s at %s (%s): add it to carvedOut (tools/releasecheck/upgrade.go) and import it in testdata/upgrade", m.Path, parent.Path, u.from, file))
				break
			}
		}
	}
	return p, notes, problems, nil
}

// fromModule returns the module tagged at the old version that holds
// import path ip: the one with the longest path ip is under.
func (u upgrade) fromModule(ip string) (taggedModule, bool) {
	var best taggedModule
	for _, m := range u.fromMods {
		if under(ip, m.Path) && len(m.Path) > len(best.Path) {
			best = m
		}
	}
	return best, best.Path != ""
}

// headModule returns the library module at HEAD that holds import path ip.
func headModule(libs []repo.Module, ip string) (repo.Module, bool) {
	var best repo.Module
	for _, m := range libs {
		if under(ip, m.Path) && len(m.Path) > len(best.Path) {
			best = m
		}
	}
	return best, best.Path != ""
}

// checkUpgrade runs the upgrade. It returns the summary lines, and whether
// every step passed.
func checkUpgrade(ctx context.Context, u upgrade) ([]string, bool) {
	var lines []string
	ok := true
	add := func(good bool, s string) {
		if !good {
			fmt.Fprintln(os.Stderr, "release-check: upgrade:", s)
		}
		if good {
			lines = append(lines, "ok   upgrade  "+s)
		} else {
			lines = append(lines, "FAIL upgrade  "+s)
			ok = false
		}
	}
	src, err := fs.ReadFile(users, "testdata/upgrade/main.go")
	if err != nil {
		add(false, err.Error())
		return lines, ok
	}
	p, notes, problems, err := u.makePlan(ctx, src)
	if err != nil {
		add(false, err.Error())
		return lines, ok
	}
	for _, n := range notes {
		fmt.Println("release-check: upgrade: note:", n)
		lines = append(lines, "note upgrade  "+n)
	}
	for _, pr := range problems {
		fmt.Fprintln(os.Stderr, "release-check: upgrade:", pr)
		add(false, pr)
	}
	if len(problems) > 0 {
		return lines, ok
	}

	get := filepath.Join(u.dir, "get")
	tidy := filepath.Join(u.dir, "tidy")
	for _, d := range []string{get, tidy} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			add(false, err.Error())
			return lines, ok
		}
	}
	gomod := "module example.com/releasecheck/upgrade\n\ngo 1.26.0\n"
	if err := os.WriteFile(filepath.Join(get, "go.mod"), []byte(gomod), 0o644); err != nil {
		add(false, err.Error())
		return lines, ok
	}
	if err := os.WriteFile(filepath.Join(get, "main.go"), src, 0o644); err != nil {
		add(false, err.Error())
		return lines, ok
	}

	// (a) The program at the old version.
	args := at(p.required, u.from)
	step := "(a) go get " + u.names(args)
	fmt.Printf("\n== upgrade %s\n", step)
	_, err = goIn(ctx, u.env, get, append([]string{"get"}, args...)...)
	var vers string
	if err == nil {
		vers, err = u.buildAndRun(ctx, get, "(a)", u.from, nil)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "release-check: upgrade %s: %v\n", step, err)
		add(false, step+": "+errLine(err))
		return lines, ok
	}
	add(true, step+"; go build, run: "+vers)
	for _, f := range []string{"go.mod", "go.sum", "main.go"} {
		data, err := os.ReadFile(filepath.Join(get, f))
		if err == nil {
			err = os.WriteFile(filepath.Join(tidy, f), data, 0o644)
		}
		if err != nil {
			add(false, err.Error())
			return lines, ok
		}
	}

	// (b) The carved-out modules first, then the others.
	if line, err := u.upgradeCarvedFirst(ctx, get, p); err != nil {
		fmt.Fprintf(os.Stderr, "release-check: upgrade %s: %v\n", line, err)
		add(false, line+": "+errLine(err))
	} else {
		add(true, line)
	}
	// (c) The modules the packages left, and the others; go mod tidy.
	if line, err := u.upgradeThenTidy(ctx, tidy, p); err != nil {
		fmt.Fprintf(os.Stderr, "release-check: upgrade %s: %v\n", line, err)
		add(false, line+": "+errLine(err))
	} else {
		add(true, line)
	}
	return lines, ok
}

// upgradeCarvedFirst is step (b) in dir. It returns the summary line (the
// step, on failure).
func (u upgrade) upgradeCarvedFirst(ctx context.Context, dir string, p plan) (string, error) {
	var mods, pkgs []string
	for _, c := range p.carves {
		mods = append(mods, c.module)
		pkgs = append(pkgs, c.pkg)
	}
	var done []string
	if len(mods) > 0 {
		args := at(mods, u.version)
		step := "(b) go get " + u.names(args)
		fmt.Printf("\n== upgrade %s\n", step)
		if _, err := goIn(ctx, u.env, dir, append([]string{"get"}, args...)...); err != nil {
			return step, err
		}
		// The carved-out packages, each found in one module: no build
		// yet, since the old version's other modules need not compile
		// against the new root.
		out, err := goIn(ctx, u.env, dir, append([]string{"list", "-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}\t{{.Version}}{{end}}"}, pkgs...)...)
		if err != nil {
			return step + ": go list", err
		}
		fmt.Print(indent(out))
		if err := u.checkCarves(p, out); err != nil {
			return step, err
		}
		vers, err := u.versions(ctx, dir, "(b)")
		if err != nil {
			return step, err
		}
		done = append(done, step+": each carved-out package found in its module; "+vers)
	} else {
		done = append(done, "(b) no carved-out module at HEAD")
	}
	args := at(p.others, u.version)
	step := "then go get " + u.names(args)
	fmt.Printf("\n== upgrade (b) %s\n", step)
	if len(args) > 0 {
		if _, err := goIn(ctx, u.env, dir, append([]string{"get"}, args...)...); err != nil {
			return strings.Join(append(done, step), "; "), err
		}
	}
	vers, err := u.buildAndRun(ctx, dir, "(b)", u.version, p.carves)
	if err != nil {
		return strings.Join(append(done, step), "; "), err
	}
	return strings.Join(append(done, step+"; go build, run: "+vers), "; "), nil
}

// upgradeThenTidy is step (c) in dir. It returns the summary line (the
// step, on failure).
func (u upgrade) upgradeThenTidy(ctx context.Context, dir string, p plan) (string, error) {
	args := at(append(slices.Clone(p.parents), p.others...), u.version)
	step := "(c) go get " + u.names(args)
	fmt.Printf("\n== upgrade %s\n", step)
	if _, err := goIn(ctx, u.env, dir, append([]string{"get"}, args...)...); err != nil {
		return step, err
	}
	vers, err := u.versions(ctx, dir, "(c) go get")
	if err != nil {
		return step, err
	}
	step += ": " + vers + "; go mod tidy"
	fmt.Printf("\n== upgrade (c) go mod tidy\n")
	if _, err := goIn(ctx, u.env, dir, "mod", "tidy"); err != nil {
		return step, err
	}
	if vers, err = u.buildAndRun(ctx, dir, "(c)", u.version, p.carves); err != nil {
		return step, err
	}
	return step + ", go build, run: " + vers, nil
}

// buildAndRun builds and runs the program in dir, checks that every
// package of this repository it builds comes from version, each of carves
// from its module, and returns the versions of this repository's modules
// in its build list.
func (u upgrade) buildAndRun(ctx context.Context, dir, label, version string, carves []activeCarve) (string, error) {
	bin := filepath.Join(dir, "user")
	if _, err := goIn(ctx, u.env, dir, "build", "-trimpath", "-o", bin, "."); err != nil {
		return "", err
	}
	pkgs, problems, err := listDeps(ctx, u.env, dir, u.rootPath, version)
	if err != nil {
		return "", err
	}
	for _, c := range carves {
		if pm := pkgs[c.pkg]; pm.Path != c.module {
			problems = append(problems, fmt.Sprintf("package %s comes from module %s, not %s", c.pkg, pm.Path, c.module))
		}
	}
	out, err := runProgram(ctx, bin)
	if err != nil {
		problems = append(problems, fmt.Sprintf("the program failed: %v\n%s", err, out))
	} else {
		fmt.Printf("upgrade %s: the program prints:\n%s", label, indent(out))
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "\n"))
	}
	return u.versions(ctx, dir, label)
}

// checkCarves checks go list's lines (import path, module path, version)
// for the carved-out packages.
func (u upgrade) checkCarves(p plan, out string) error {
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(l, "\t")
		if len(f) == 3 {
			got[f[0]] = f[1] + " " + f[2]
		}
	}
	var problems []string
	for _, c := range p.carves {
		if want := c.module + " " + u.version; got[c.pkg] != want {
			problems = append(problems, fmt.Sprintf("package %s comes from module %q, not %s", c.pkg, got[c.pkg], want))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// versions prints the modules of this repository in dir's build list and
// returns them as "dedup v0.1.0, dedup/adapters/nats v0.1.0".
func (u upgrade) versions(ctx context.Context, dir, label string) (string, error) {
	out, err := goIn(ctx, u.env, dir, "list", "-m", "all")
	if err != nil {
		return "", err
	}
	var own, short []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && under(f[0], parentOf(u.rootPath)) {
			own = append(own, l)
			short = append(short, shortName(u.rootPath, f[0])+" "+strings.Join(f[1:], " "))
		}
	}
	fmt.Printf("upgrade %s: go list -m all, this repository's modules:\n%s", label, indent(strings.Join(own, "\n")))
	return strings.Join(short, ", "), nil
}

// names shortens module queries for the summary.
func (u upgrade) names(queries []string) string {
	var out []string
	for _, q := range queries {
		out = append(out, shortName(u.rootPath, q))
	}
	return strings.Join(out, " ")
}

// at returns each module path of mods with @version.
func at(mods []string, version string) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m+"@"+version)
	}
	return out
}
