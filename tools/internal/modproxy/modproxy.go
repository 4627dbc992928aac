// Package modproxy writes module versions from a git repository into a
// directory laid out as a GOPROXY serves them, so that the go command can
// download them with GOPROXY=file://DIR:
//
//	DIR/<escaped module path>/@v/list
//	DIR/<escaped module path>/@v/<version>.info
//	DIR/<escaped module path>/@v/<version>.mod
//	DIR/<escaped module path>/@v/<version>.zip
//
// The zips are made by golang.org/x/mod/zip from the tagged revision, as
// the go command makes them from a VCS: files of nested modules are left
// out.
package modproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"

	"github.com/dedup-go/dedup/tools/internal/repo"
)

// Version is one module version to publish.
type Version struct {
	// Path is the module path.
	Path string
	// Version is the module version, such as v0.1.0.
	Version string
	// Subdir is the module's directory in the repository, slash
	// separated; "" for the root.
	Subdir string
	// Revision is the git revision holding the version, usually its tag.
	Revision string
}

// Add writes each version of versions, taken from the git repository at
// repoRoot, into the proxy directory dir, creating it if needed. A version
// already in the list of its module is written again.
func Add(ctx context.Context, dir, repoRoot string, versions []Version) error {
	repoRoot, err := filepath.Abs(repoRoot)
	if err != nil {
		return err
	}
	for _, v := range versions {
		if err := add(ctx, dir, repoRoot, v); err != nil {
			return fmt.Errorf("%s@%s: %w", v.Path, v.Version, err)
		}
	}
	return nil
}

func add(ctx context.Context, dir, repoRoot string, v Version) error {
	if err := module.Check(v.Path, v.Version); err != nil {
		return err
	}
	esc, err := module.EscapePath(v.Path)
	if err != nil {
		return err
	}
	escVer, err := module.EscapeVersion(v.Version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	commit, err := repo.Git(ctx, repoRoot, "rev-parse", "--verify", v.Revision+"^{commit}")
	if err != nil {
		return err
	}
	when, err := repo.Git(ctx, repoRoot, "log", "-1", "--format=%ct", commit)
	if err != nil {
		return err
	}
	var secs int64
	if _, err := fmt.Sscan(when, &secs); err != nil {
		return fmt.Errorf("commit time %q: %w", when, err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v.Version, time.Unix(secs, 0).UTC()})
	if err != nil {
		return err
	}
	goMod, err := repo.GitRaw(ctx, repoRoot, "show", commit+":"+path.Join(v.Subdir, "go.mod"))
	if err != nil {
		return err
	}
	var zip bytes.Buffer
	if err := modzip.CreateFromVCS(&zip, module.Version{Path: v.Path, Version: v.Version}, repoRoot, commit, v.Subdir); err != nil {
		return err
	}
	base := filepath.Join(vdir, escVer)
	for name, data := range map[string][]byte{".info": info, ".mod": goMod, ".zip": zip.Bytes()} {
		if err := os.WriteFile(base+name, data, 0o644); err != nil {
			return err
		}
	}
	return addToList(filepath.Join(vdir, "list"), v.Version)
}

func addToList(file, version string) error {
	var versions []string
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	for _, l := range strings.Fields(string(data)) {
		if l != version {
			versions = append(versions, l)
		}
	}
	versions = append(versions, version)
	slices.SortFunc(versions, semver.Compare)
	return os.WriteFile(file, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
